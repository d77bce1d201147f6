// Package floodgatetest checks a floodgate.Store against its contract, as
// testing/slogtest checks a slog.Handler: the authors of a store call
// [Run] from a test, and every store floodgate ships (memstore,
// redisstore, and the wrappers lease and observe over them) runs the same
// cases.
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
//		}, nil)
//	}
//
// A store shared between tests (a Redis server) gives each store a key
// prefix of its own. If the store implements io.Closer, Run closes it when
// the subtest that made it ends.
//
// # What Run checks
//
// Run checks one of the two tiers of the floodgate.Store contract. With a
// nil *Options, the exact tier: every step decided exactly as the
// reference transitions of package step decide it. Every case goes
// through a floodgate.Limiter made by floodgate.New (Allow, AllowN,
// Reserve, Wait, Apply), and through the store's Bound directly, whose
// Take must decide as its Apply:
//
//   - Steps: hand-computed decisions of every algorithm and operation, on a
//     virtual clock.
//   - Errors: bad arguments, unusable configurations and names, and a
//     clock outside 1970 to 2255 give errors matching floodgate's
//     sentinels.
//   - Reference: random traces of every operation, by every route, with
//     the clock moving forwards, backwards (by at most a tenth of a
//     window and 3 s, less than a store's expiry margin should be) and not
//     at all, give exactly the Results of the reference transitions of
//     package step. Calendar days that reset within the traces' first
//     half minute are among the configurations drawn.
//   - Models: random AllowN traces agree with naive implementations of the
//     algorithms written from their definitions, and the sliding log never
//     holds more than its limit in any window.
//   - StateIdentity: a step's state belongs to the limiter's name, the key
//     and the algorithm's kind: two limiters of different configurations
//     and no name (a search limit and an upload limit keyed by one user),
//     and one configuration under two names, keep apart; limiters of one
//     name and kind with different configurations decide as the reference
//     applied to one shared state, a configuration changed mid-traffic
//     under one name continues from the old one's state (under derived
//     names it starts afresh), the five kinds on one key are independent,
//     and the limits of a Limits share state by name, kind and ordinal.
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
// # The conservative tier
//
// With Options.Conservative, Run checks the conservative tier instead: a
// store, typically a wrapper that decides some steps without the store
// under it (lease serves takes from local pools), may deny what the
// reference would admit, but never admits what the reference, given the
// same admissions, would deny. The cases run on every algorithm the
// store binds, through the stores of Options.Fleet (several processes
// over one backend) when it is set:
//
//   - Errors: bad arguments give the sentinels, as for an exact store.
//   - NeverOver: random traces of takes, reservations and takes up to n
//     units through every store, with the clock moving forwards or
//     staying; the units admitted, replayed through the reference
//     at the instants they were admitted for, must all be admitted again
//     (for a token bucket, at most Burst + Rate·t in any interval t; for
//     the windows, at most the limit per window).
//   - Concurrent: goroutines through every store on one key, on a frozen
//     clock, admit no more than the quota.
//   - UnderAdmission: on a frozen clock, the first denial comes no
//     earlier than the quota less the store's stated bound
//     (Options.UnderAdmission).
//   - Close: as for an exact store.
//
// The randomized cases draw a new seed at each run and print it when they
// fail; set the environment variable FLOODGATETEST_SEED to that number to
// replay the run.
//
// A store's own tests can use [Clock], a virtual clock, and [Reference],
// the decisions every store must make, where they drive the store in ways
// Run cannot (its eviction, reclamation or options).
package floodgatetest
