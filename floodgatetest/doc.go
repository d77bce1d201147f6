// Package floodgatetest checks a floodgate.Store against its contract, as
// testing/slogtest checks a slog.Handler: the authors of a store call
// [Run] from a test, and every store floodgate ships (memstore,
// redisstore) runs the same cases.
//
// A store's test hands Run a function that returns a fresh store, on the
// clock it is given:
//
//	func TestConformance(t *testing.T) {
//		floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
//			s, err := mystore.New(&mystore.Options{Now: now, Prefix: uniquePrefix(t)})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// A store shared between tests (a Redis server) gives each store a key
// prefix of its own. If the store implements io.Closer, Run closes it when
// the subtest that made it ends.
//
// # What Run checks
//
// Every case goes through a floodgate.Limiter made by floodgate.New (Allow,
// AllowN, Reserve, Wait, Apply), and through the store's Bound directly,
// whose Take must decide as its Apply:
//
//   - Steps: hand-computed decisions of every algorithm and operation, on a
//     virtual clock.
//   - Errors: bad arguments, unusable configurations and a clock outside
//     1970 to 2262 give errors matching floodgate's sentinels.
//   - Reference: random traces of every operation, by every route, with
//     the clock moving forwards, backwards and not at all, give exactly
//     the Results of the reference transitions of package step.
//   - Models: random AllowN traces agree with naive implementations of the
//     algorithms written from their definitions, and the sliding log never
//     holds more than its limit in any window.
//   - StateIdentity: a key's state belongs to the key and the algorithm's
//     kind: limiters of one kind with different configurations on one key
//     decide as the reference applied to one shared state, a configuration
//     changed mid-traffic continues from the old one's state, and the five
//     kinds on one key are independent.
//   - Concurrent: goroutines on one key, on many keys, and on one key under
//     two configurations, on a frozen virtual clock, admit exactly the
//     quota, each admission seeing its own state.
//   - OwnClock: on the store's own clock (now is nil), decisions that do
//     not depend on the instant (Remaining, Limit, RetryAfter on every
//     denial, a denial that changes nothing, a refund that gives units
//     back, a cancelled Wait that gives its units back), and quotas
//     admitted exactly once under concurrency.
//   - Close: for a store that implements io.Closer, decisions after Close
//     fail with an error matching floodgate.ErrUnavailable, and none hangs.
//
// The randomized cases draw a new seed at each run and print it when they
// fail; set the environment variable FLOODGATETEST_SEED to that number to
// replay the run.
//
// A store's own tests can use [Clock], a virtual clock, and [Reference],
// the decisions every store must make, where they drive the store in ways
// Run cannot (its eviction, reclamation or options).
package floodgatetest
