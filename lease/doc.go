// Package lease serves rate-limit decisions from local pools of units leased
// in batches from a remote floodgate.Limiter, typically one on Redis, so
// that most decisions cost tens of nanoseconds instead of a round trip.
//
// Most users want [New] over a limiter of floodgate.New on a redisstore,
// then [Limiter.Allow] or [Limiter.AllowN] per request, and [Limiter.Close]
// at shutdown, which gives the unused units back:
//
//	remote, _ := floodgate.New(store, alg)
//	lim, err := lease.New(remote, nil)
//	...
//	defer lim.Close()
//	d, err := lim.Allow(ctx, key)
//
// The remote's algorithm (its Algorithm method) decides how long
// leased units stay valid and whether they can be given back. A [*Limiter] is a
// floodgate.Limiter, so it goes wherever one goes (the net/http middleware,
// the client RoundTripper).
//
// # How it works
//
// For each key, a process keeps a pool: a count of units that the remote
// admitted to it with one Apply(OpTakeUpTo) round trip ("take up to batch"). A
// decision takes its units from the pool with a compare-and-swap, without a
// lock, an allocation or a round trip. When a decision leaves fewer units
// than Options.LowWater of the batch, it starts a refill in the background;
// there is at most one refill in flight per key, and a caller that finds the
// pool empty waits for that refill (bounded by its context) instead of
// making its own round trip. The batch adapts to the key's local
// consumption: about the units consumed in Options.TargetInterval, within
// Options.MinBatch and Options.MaxBatch; a pool and its refill in flight
// never hold more than MaxBatch units.
//
// Units expire: after Options.TTL without a refill, so that an idle process
// does not hoard quota (a background goroutine enforces it), and for the
// window algorithms at the end of the remote window they were counted in,
// which every decision checks (see below). Unused units are given
// back with Apply(OpSettle, a negative N) when they expire and on Close, where the algorithm
// allows: the token bucket (as long as the tokens have not refilled), the
// fixed window (within the window), the sliding window counter (within the
// current or the previous window) and the sliding log (while the log
// entries are in the window). A leaky bucket cannot be leased: New rejects
// it, since a pool would admit its units at once and defeat the shaping,
// and so is a floodgate.Limits, whose limits would expire leased units at
// different instants.
//
// Requests a pool cannot serve go to the remote: more units than MaxBatch;
// Reserve and Wait when the pool lacks the units (a pool only admits at
// once, with Delay 0); and an AllowN of several units whose refill the
// remote could not fill in full. An AllowN of one unit that finds the
// remote out of units is denied with the remote's Decision from the
// refill, which all the callers waiting for it share: over its quota, a key
// costs about one round trip per refill rather than one per denial. A
// decision served from a pool reports estimates in Remaining and
// ResetAfter; see [Limiter.AllowN].
//
// # The bound
//
// Admission never exceeds the remote's: every unit a Limiter admits was
// granted to it by the remote's Apply(OpTakeUpTo) and is admitted once, and a unit
// is given back only while unused (decisions and returns race on one
// atomic counter). Summed over every process and key, the units admitted
// are at most the units the remote admitted minus those it took back. A
// failed or timed-out round trip may have consumed units at the remote that
// no process received: they are lost, never over-admitted.
//
// Under-admission at any instant is at most the units held in pools and
// refills in flight: per key at most MaxBatch per process, so at most
// (processes × MaxBatch) for a key. When the remote denies a refill, the
// units other processes hold are all the quota the key is missing.
//
// Leasing also moves admissions in time: a unit the remote counted at the
// lease's instant a is used at a later instant u. Whether the remote
// algorithm would have admitted the units at the instants they are used
// depends on the algorithm, and is why leases expire per algorithm:
//
//   - Fixed window (exact): a unit counted in window k is used in window k,
//     never later: every decision checks that the pool's window has not
//     ended. The window's end is carried to the local clock from the
//     instant the request left (before a), so the local deadline is never
//     after the remote window's end whatever the clocks' offset; it also
//     comes 1/1024 of the time left early, so that a local clock running
//     up to 0.1% slower than the remote's (NTP keeps them within 0.01%)
//     cannot stretch it. The units used in window k are then at most those
//     counted in it, at most Limit: the remote algorithm's own guarantee,
//     including its known 2·Limit across a boundary.
//   - Sliding window counter (exact): the same expiry. Within window k, the
//     units used by any instant t are at most those counted by t (a unit is
//     used at or after it was counted), and the count of window k−1 is the
//     same or smaller (unused units never count more). So the estimate
//     prev·(1−f) + curr over the units as used never exceeds the estimate
//     over the units as counted, which the remote kept at or below Limit at
//     every instant: every use is one the sliding counter itself admits.
//     A unit of window k used in window k+1 would break this (it would
//     count in neither window's curr at its use), hence the expiry.
//   - Token bucket (relaxed by the units held): tokens taken earlier can be
//     spent later; the bucket already accounted them, so counts never
//     exceed the remote's. The burst bound moves, though: while a process
//     holds units, the bucket refills behind them. In any interval [s, t],
//     the units used are at most Burst + Rate·(t−s) (the remote's bound)
//     plus the units held in pools at s.
//   - Sliding log (relaxed by the units held): using a unit later than it
//     was logged is not free. The remote drops the entry at a+Window and
//     may admit another unit then, while the unit used at u > a still
//     counts, as used, until u+Window: with Limit 1, a unit leased at 0 and
//     used at 0.9·Window, and one leased and used at 1.0·Window, are two
//     uses within one window. No expiry short of zero avoids this. What
//     holds: in any window (s, s+Window], the units used are at most Limit
//     plus the units held in pools at s (a unit logged at or before s and
//     used after s was held at s). Use the remote directly when the log
//     must be exact (logins, payouts); lease it when "Limit plus what the
//     pools hold" is good enough.
//
// In every case the overshoot beyond the remote algorithm's own bound, in
// any interval, is at most the units held in pools at its start: zero for
// the fixed and sliding windows, at most processes × MaxBatch per key for
// the token bucket and the sliding log.
//
// # Failures
//
// Remote errors follow the remote's failure policy. With an error-returning
// store, a decision that needs a round trip returns the remote's error
// (matching floodgate.ErrUnavailable for a failed store), while units
// already in a pool keep being served until they expire. A pool never
// admits units the remote did not grant, except under a store's explicit
// fail-open policy (redisstore's FailOpen), whose grants are admitted as
// the store decided but never refunded: they were not counted, and giving
// them back to the recovered remote would over-admit. (They are recognized
// by ResetAfter == 0 on a grant, which no algorithm's step produces.)
// Units granted by redisstore's FailLocal cannot be told apart from units
// granted by Redis: leasing over FailLocal may give back, after Redis
// recovers, up to the units held when it failed.
//
// # Clock and goroutines
//
// Expiry runs on the local clock (Options.Now, by default monotonic); only
// durations on it matter, so it need not agree with the remote's clock. A
// Limiter owns one goroutine that returns expired units and forgets keys
// idle for a TTL, plus one per refill in flight (at most one per key); Close
// stops them all.
//
// # Observing
//
// [Limiter.Stats] counts decisions and round trips. For metrics, give
// Options.Observer an observe.Observer: OnLease receives every round trip
// (the units asked for and granted, its latency, and the decisions served
// locally and waited since the key's previous one, from which the local
// hit ratio follows) and OnReturn every return of unused units, named by
// Options.Name. Decisions themselves are reported by observe.Wrap around
// the Limiter (and around its remote, to see the round trips' steps).
package lease
