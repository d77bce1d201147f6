// Package lease serves rate-limit decisions from local pools of units
// leased in batches from a remote floodgate.Store, typically a redisstore
// shared by every process, so that most decisions cost tens of
// nanoseconds instead of a round trip.
//
// A lease [Store] is a floodgate.Store that wraps another. Most users want
// [New] over a redisstore, then floodgate.New on the lease Store for each
// limiter, Allow or AllowN per request, and [Store.Close] at shutdown,
// which gives the unused units back:
//
//	redis, err := redisstore.New(client, nil)
//	...
//	ls, err := lease.New(redis, nil)
//	...
//	defer ls.Close() // gives the units held back; redis stays open
//	lim, err := floodgate.New(ls, floodgate.FixedWindow{Limit: 1000, Window: time.Minute},
//		&floodgate.Options{Name: "api"})
//	...
//	d, err := lim.Allow(ctx, key)
//
// The limiter's algorithm, which the lease receives when the limiter binds
// (floodgate.Store's Bind), decides how long leased units stay valid and
// whether they can be given back. One lease Store serves any number of
// limiters: each name and algorithm bound to it has pools of its own and
// binds the remote under the same name, so limiters of different names
// never share pools or remote state, while the processes of a fleet, each
// with its own lease Store over one Redis, share a limiter's quota by
// giving it one name. Limiters of one name and algorithm in one process
// share their pools.
//
// # How it works
//
// For each key of a limiter, a lease Store keeps a pool: a count of units
// that the remote admitted to it with one Apply(OpTakeUpTo) round trip
// ("take up to batch"). A decision (Take, the step of a limiter's Allow
// and AllowN) takes its units from the pool with a compare-and-swap,
// without a lock, an allocation or a round trip. When a decision leaves
// fewer units than Options.LowWater of the batch, it starts a refill in
// the background; there is at most one refill in flight per key, and a
// caller that finds the pool empty waits for that refill (bounded by its
// context) instead of making its own round trip. The batch adapts to the
// key's local consumption: about the units consumed in
// Options.TargetInterval, within Options.MinBatch and Options.MaxBatch; a
// pool and its refill in flight never hold more than MaxBatch units.
//
// Units expire: after Options.TTL without a refill, so that an idle
// process does not hoard quota (a background goroutine enforces it), and
// for the window algorithms at the end of the remote window they were
// counted in (for a sliding window with sub-windows, the end of the
// sub-window), which every decision checks (see below). Unused units are
// given back with Apply(OpSettle, a negative N) when they expire and on
// Close, where the algorithm allows: the token bucket (as long as the
// tokens have not refilled), the fixed window (within the window), the
// sliding window counter (within the current or the previous window) and
// the sliding log (while the log entries are in the window). Bind refuses
// a leaky bucket, since a pool would admit its units at once and defeat
// the shaping, and a floodgate.Limits, whose limits would expire leased
// units at different instants: bind those to the remote directly, with
// floodgate.New on the remote store.
//
// Steps a pool cannot serve go to the remote: a take of more units than
// MaxBatch; a reservation (OpTake with a MaxDelay, the step of a
// limiter's Reserve and Wait) when the pool lacks the units, since a pool
// only admits at once, with Delay 0; a take of several units whose refill
// the remote could not fill in full; and every step that is not a take: a
// check (Request.Check), which reports the remote's state and consumes no
// pool unit, a take up to n, and a settlement, which charges or gives back
// units at the remote (a Wait whose context ends gives back there what the
// remote reserved for it). A take of one unit that finds the remote out of
// units is denied with the remote's Decision from the refill, which all
// the callers waiting for it share: over its quota, a key costs about one
// round trip per refill rather than one per denial. A decision served from
// a pool reports estimates in Remaining and ResetAfter: Remaining is the
// units left in the pool plus the remote's Remaining at the key's last
// lease, ResetAfter the remote's at that lease (counted down on the local
// clock for the window algorithms); neither sees what other processes
// consumed since.
//
// # The tier
//
// floodgate.Store defines two tiers. An exact store decides every step as
// the reference transition of package step does. A conservative store may
// deny what the reference would admit, but never admits what the
// reference, given the same admissions, would deny, over any interval and
// under any concurrency, and states its bound of under-admission.
//
// A lease Store is in the conservative tier for the fixed window and the
// sliding window counter: its under-admission is at most the units held in
// pools and refills in flight, at most MaxBatch per key per lease Store, so
// at most processes × MaxBatch per key for a fleet of processes with one
// lease Store each. It is in neither tier for the token bucket and the
// sliding log: in any interval it may admit, beyond the algorithm's own
// bound, up to the units held in pools at the interval's start (at most
// processes × MaxBatch per key), and it under-admits by at most as many.
// Bind accepts them, for callers to whom "the algorithm's bound plus what
// the pools hold" is good enough; a limiter that must keep the exact bound
// (logins, payouts) belongs on the remote store directly. The rest of this
// section proves these statements.
//
// Admission never exceeds the remote's: every unit a pool admits was
// granted to it by the remote's Apply(OpTakeUpTo) and is admitted once,
// and a unit is given back only while unused (decisions and returns race
// on one atomic counter). Summed over every process and key, the units
// admitted are at most the units the remote admitted minus those it took
// back. A failed or timed-out round trip may have consumed units at the
// remote that no process received: they are lost, never over-admitted.
//
// Under-admission at any instant is at most the units held in pools and
// refills in flight: per key at most MaxBatch per lease Store. When the
// remote denies a refill, the units other processes hold are all the
// quota the key is missing.
//
// Leasing also moves admissions in time: a unit the remote counted at the
// lease's instant a is used at a later instant u. Whether the remote
// algorithm would have admitted the units at the instants they are used
// depends on the algorithm, and is why leases expire per algorithm:
//
//   - Fixed window (conservative): a unit counted in window k is used in
//     window k, never later: every decision checks that the pool's window
//     has not ended. The window's end is carried to the local clock from
//     the instant the request left (before a), so the local deadline is
//     never after the remote window's end whatever the clocks' offset; it
//     also comes 1/1024 of the time left early, so that a local clock
//     running up to 0.1% slower than the remote's (NTP keeps them within
//     0.01%) cannot stretch it. The units used in window k are then at
//     most those counted in it, at most Limit: the remote algorithm's own
//     guarantee, including its known 2·Limit across a boundary.
//   - Sliding window counter (conservative): the same expiry. Within
//     window k, the units used by any instant t are at most those counted
//     by t (a unit is used at or after it was counted), and the count of
//     window k−1 is the same or smaller (unused units never count more).
//     So the estimate prev·(1−f) + curr over the units as used never
//     exceeds the estimate over the units as counted, which the remote
//     kept at or below Limit at every instant: every use is one the
//     sliding counter itself admits. A unit of window k used in window
//     k+1 would break this (it would count in neither window's curr at its
//     use), hence the expiry.
//   - Token bucket (not conservative): tokens taken earlier can be spent
//     later; the bucket already accounted them, so counts never exceed the
//     remote's. The burst bound moves, though: while a process holds
//     units, the bucket refills behind them. In any interval [s, t], the
//     units used are at most Burst + Rate·(t−s) (the remote's bound) plus
//     the units held in pools at s.
//   - Sliding log (not conservative): using a unit later than it was
//     logged is not free. The remote drops the entry at a+Window and may
//     admit another unit then, while the unit used at u > a still counts,
//     as used, until u+Window: with Limit 1, a unit leased at 0 and used
//     at 0.9·Window, and one leased and used at 1.0·Window, are two uses
//     within one window. No expiry short of zero avoids this. What holds:
//     in any window (s, s+Window], the units used are at most Limit plus
//     the units held in pools at s (a unit logged at or before s and used
//     after s was held at s).
//
// In every case the overshoot beyond the remote algorithm's own bound, in
// any interval, is at most the units held in pools at its start: zero for
// the fixed and sliding windows, at most processes × MaxBatch per key for
// the token bucket and the sliding log.
//
// # A fleet
//
// Each process sizes a key's pool by its own demand, up to MaxBatch, so a
// fleet of processes together may hold up to processes × MaxBatch units
// of a key, and which of them holds the quota is whoever refilled first.
// With Options.Fleet the processes share their demand for each key
// (units consumed and denied per second, recorded at most once per
// Options.FleetInterval from a refill's goroutine: never on a decision's
// path, and only for keys that refill) and each holds at most its share
// of Options.FleetBatch: the water-filling fair share (region.FairShare,
// the allocator that splits a quota across regions) of the processes'
// claims, a claim being what a process's demand consumes in two
// TargetIntervals, plus an equal part of what the claims leave. A process
// whose claim fits gets all of it; the busier ones share the rest. The
// shares computed from one set of demands add up to FleetBatch at most,
// each at least MinBatch, so with steady demand, once every process has
// computed its share from the others' measured demands (two or three
// FleetIntervals after the demand settles, and a pool's drain more), the
// pools of a key hold at most FleetBatch + processes × MinBatch units
// between them; while demands move, the processes compute their shares a
// FleetInterval apart from different measures, and the shares may add up
// to more. A key's refills in a process are sized as without a Fleet (up
// to MaxBatch) until its second record, a FleetInterval after its first
// refill: the first carries no measured demand, and a share from it would
// hold a newcomer to a busy fleet at MinBatch, a round trip a decision. So
// are a process's refills while its Fleet fails (Stats.ShareErrors). The Fleet
// sizes pools only: the bound above is unchanged (no process admits a unit
// the remote did not grant), and the under-admission it allows is smaller.
// redisstore's Store.LeaseFleet keeps the demands in the Redis the fleet
// leases from, beside each key's state; MemFleet shares them between
// Stores in one process.
//
// # Failures
//
// Remote errors follow the remote's failure policy. With an
// error-returning store, a decision that needs a round trip returns the
// remote's error (matching floodgate.ErrUnavailable for a failed store),
// while units already in a pool keep being served until they expire. A
// pool never admits units the remote did not grant, except under a
// store's explicit fail-open policy (redisstore's FailOpen), whose grants
// are admitted as the store decided but never refunded: they were not
// counted, and giving them back to the recovered remote would over-admit.
// (They are recognized by ResetAfter == 0 on a grant, which no
// algorithm's step produces.) Units granted by redisstore's FailLocal
// cannot be told apart from units granted by Redis: leasing over FailLocal
// may give back, after Redis recovers, up to the units held when it
// failed. A refill that fails leases nothing; every refill asks
// floodgate.Request.UndoLate, so a remote that learns it made a refill
// after the lease gave up on it (redisstore, for a timeout) gives the
// units back rather than leaving them taken by no pool.
//
// # Clock and goroutines
//
// Expiry runs on the local clock (Options.Now, by default monotonic),
// one for every limiter of the Store; only durations on it matter, so it
// need not agree with the remote's clock. A Store owns one goroutine that
// returns expired units and forgets keys idle for a TTL, for all its
// limiters, plus one per refill in flight (at most one per key); Close
// stops them all, and every step after Close fails with an error matching
// floodgate.ErrUnavailable and floodgate.ErrClosed. Close does not close
// the remote store.
//
// # Observing
//
// [Store.Stats] counts decisions and round trips over all the Store's
// limiters. For metrics, give Options.Observer an observe.Observer:
// OnLease receives every round trip (the units asked for and granted, its
// latency, and the decisions served locally and waited since the key's
// previous one, from which the local hit ratio follows) and OnReturn every
// return of unused units, each named by the name of the limiter whose key
// it is. Decisions themselves are observed by wrapping the lease Store
// with observe.Store, which counts them at the Bound under each limiter's
// name (and whose Close closes the lease Store); wrapping the remote store
// as well shows the round trips' steps:
//
//	ls, err := lease.New(redis, &lease.Options{Observer: obs})
//	...
//	observed, err := observe.Store(ls, obs)
//	...
//	lim, err := floodgate.New(observed, alg, &floodgate.Options{Name: "api"})
package lease
