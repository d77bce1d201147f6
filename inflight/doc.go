// Package inflight is a concurrent-request limiter: per key, at most Limit
// requests in flight at once, across every process that shares a store.
// It is the second of Stripe's four tiers (a rate limiter, a
// concurrent-request limiter, and two load shedders): a rate limit bounds
// how often a client starts requests, this bounds how many of its requests
// run at once, which is what protects an expensive endpoint from a client
// whose requests get slow.
//
// Most users want [New] over a memstore.Store for one process, or a
// redisstore.Store for many, and [Limiter.Acquire] per request with a
// deferred [Slot.Release]:
//
//	store, _ := memstore.New(nil)
//	lim, _ := inflight.New(store, 20, nil)
//	defer lim.Close()
//
//	slot, err := lim.Acquire(ctx, "user:42")
//	if err == nil && !slot.Allowed {
//		// reject (429); slot.RetryAfter is a hint
//	}
//	defer slot.Release(ctx)
//
// httplimit.NewInflight is the same for net/http, as middleware.
//
// # Stores
//
// A [Store] keeps the holds of keys: Acquire adds one if the key has fewer
// than the limit, atomically, and Release removes it. The Limiter keeps
// what is common to every store: the checks, the Decision, and the
// renewal of holds that expire.
//
// memstore counts the holds of a key in one word, updated with
// compare-and-swap, and gives each hold a pooled holder with a generation:
// Acquire and Release take no lock and allocate nothing for a key in use,
// and a second Release of a hold finds a newer generation and does
// nothing. Its holds never expire: their holders live in its process.
//
// redisstore keeps a key's holds in a sorted set of holder ids scored by
// their expiry (Stripe's design), one script per Acquire (drop the expired
// holders, count, add) and one per Release, on the server's clock. A
// process that dies holding slots frees them within Options.TTL; the
// Limiter renews the slots of longer requests every Options.RenewEvery
// from one goroutine, so a request shorter than that costs exactly two
// round trips. See redisstore for the key layout and the failure policy.
//
// # Exactness
//
// The live holds of a key never exceed the limit: on memstore exactly; on
// Redis as long as the sorted set survives (asynchronous replication can
// lose the newest holds in a failover, which then admits up to twice the
// limit until they end) and as long as each holder renews in time (a
// process stalled past its TTL loses its slots to others while its
// requests run on).
//
// # Observing
//
// Options.Observer, an observe.Observer, receives every Acquire
// (OnAcquire: allowed, denied or failed, with the key's requests in
// flight) and every release of a slot (OnRelease: how long it was held),
// named by Options.Name, without an allocation.
package inflight
