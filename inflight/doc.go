// Package inflight is a concurrent-request limiter: per key, at most Limit
// requests in flight at once, across every process that shares a store.
// It is the second of Stripe's four tiers (a rate limiter, a
// concurrent-request limiter, and two load shedders): a rate limit bounds
// how often a client starts requests, this bounds how many of its requests
// run at once, which is what protects an expensive endpoint from a client
// whose requests get slow.
//
// Most users want [New] over a [LocalStore] for one process, or a
// redisstore.Store for many, and [Limiter.Acquire] per request with a
// deferred [Slot.Release]:
//
//	store := inflight.NewLocalStore()
//	lim, _ := inflight.New(store, 20, &inflight.Options{Name: "export"})
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
// # Names
//
// A key's holds belong to the key under the Limiter's name, as a rate
// limit's state belongs to (limiter name, key) in floodgate: two limiters
// on one store share a key's holds only if they share a name, so an
// upload limiter and an export limiter keyed by the same user id never
// count each other's requests. The name is Options.Name, or by default
// "inflight:" and the limit, such as "inflight:20" ([Limiter.Name]):
// limiters of different limits keep apart, and the processes of a fleet,
// built with one configuration, share. The events a Limiter reports carry
// the same name.
//
// A limit changed under the default name is a new name: during a rolling
// deploy from 10 to 20, the new processes start with no holds under
// "inflight:20" while the old ones hold theirs under "inflight:10", so a
// key may have up to 10 + 20 requests in flight until the old ones end.
// Under an explicit name the new processes count the old ones' holds
// against the new limit (a lowered limit denies until enough of them end;
// Status.InFlight may then exceed Status.Limit). Name a limiter whose
// limit may change, and every pair of limiters of equal limits that must
// not share.
//
// # Stores
//
// A [Store] keeps the holds of keys: Acquire adds one if the key has fewer
// than the limit under the name, atomically, and Release removes it. The
// Limiter keeps what is common to every store: the checks, the Status,
// and the renewal of holds that expire.
//
// [LocalStore], the in-process store, counts the holds of a key in one
// word, updated with compare-and-swap, and gives each hold a pooled holder
// with a generation: Acquire and Release take no lock and allocate nothing
// for a key in use, and a second Release of a hold finds a newer
// generation and does nothing. Its holds never expire: their holders live
// in its process. It keeps the keys of each name apart in one table by a
// prefix of the name's number.
//
// redisstore keeps the holds of a key under a name in a sorted set of
// holder ids scored by their expiry (Stripe's design), at
// Prefix + "{key}:" + name + ":if", one script per Acquire (drop the
// expired holders, count, add) and one per Release, on the server's
// clock. A process that dies holding slots frees them within Options.TTL;
// the Limiter renews the slots of longer requests every
// Options.RenewEvery from one goroutine, so a request shorter than that
// costs exactly two round trips. See redisstore for the key layout and
// the failure policy.
//
// # Exactness
//
// The live holds of a key under a name never exceed the limit of the
// Acquire that took the last of them: on a LocalStore exactly; on
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
// named by the Limiter's name (see Names), without an allocation.
package inflight
