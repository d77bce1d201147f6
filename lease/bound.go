package lease

import (
	"context"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// binding serves the decisions of one limiter (a name and an algorithm)
// from per-key pools of units leased from its remote Bound; see the
// package doc for what it guarantees. It is the Bound of Store.Bind.
type binding struct {
	s      *Store
	remote floodgate.Bound
	name   string
	kind   step.Kind
	policy floodgate.Policy
	// window is the remote window whose end bounds a lease, in ns: the
	// window of a fixed or sliding window; 0 for the other kinds.
	window int64
	cfg    config

	entries *xsync.Map[string, *entry]
}

var _ floodgate.Bound = (*binding)(nil)

// Take admits n units now or denies them (Allow and AllowN of a limiter on
// the Store). When the key's pool holds n units it admits them without a
// lock, an allocation or a round trip, and ignores ctx. Otherwise it
// waits, bounded by ctx, for the key's refill in flight or one it starts,
// and serves n units from the refilled pool; when the remote has no units
// left it denies with the remote's Decision. A request the pool cannot
// serve after that (more units than MaxBatch, or a pool drained by
// concurrent callers while the remote still had units) goes to the
// remote's Take. A denial changes no state.
//
// An admitted Decision reports the remote's Limit, Delay 0, and estimates
// in Remaining and ResetAfter: Remaining is the units left in this
// process's pool plus the remote's Remaining at the key's last lease;
// ResetAfter is the remote's at that lease, counted down on the local clock
// for the window algorithms (whose decisions read the clock anyway) and as
// it was for the token bucket and the sliding log (whose decisions do not).
// Neither sees what other processes consumed since the last lease. A pool
// refilled every TargetInterval keeps them that fresh.
func (l *binding) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	// A key in the map passed CheckKey when it was added.
	if e, ok := l.entries.Load(key); ok && n >= 1 && n <= l.policy.Quota {
		if p, left, now, ok := l.take(e, n, true); ok {
			return l.decision(p, left, now), nil
		}
	}
	if err := l.check(key, floodgate.Request{N: n}); err != nil {
		return floodgate.Decision{}, err
	}
	d, decided, err := l.acquire(ctx, key, n, true)
	if err != nil || decided {
		return d, err
	}
	l.s.forwarded.Add(1)
	d, err = l.remote.Take(ctx, key, n)
	if err == nil && !d.Allowed {
		l.deniedRemotely(key, n)
	}
	return d, err
}

// Apply performs one step. A take (OpTake, not a check) is decided from
// the key's pool when it can, as Take (a pool admits at once, with Delay
// 0, and reports the local clock in Result.At), and otherwise by the
// remote's Apply, which may admit a reservation with a delay: the step of
// a limiter's Reserve and Wait. A check, OpTakeUpTo and OpSettle go to the
// remote as they are: the units they count, take or give back are the
// remote's, never a pool's (a cancelled Wait gives back the units the
// remote reserved for it).
func (l *binding) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if req.Op != floodgate.OpTake || req.Check {
		// Checked here as well as by the remote: the errors of bad
		// arguments and of a closed Store do not depend on the remote.
		if err := l.check(key, req); err != nil {
			return floodgate.Result{}, err
		}
		return l.remote.Apply(ctx, key, req, each)
	}
	n := req.N
	if e, ok := l.entries.Load(key); ok && n >= 1 && n <= l.policy.Quota && req.MaxDelay >= 0 {
		if p, left, now, ok := l.take(e, n, true); ok {
			return l.pooled(l.decision(p, left, now), n), nil
		}
	}
	if err := l.check(key, req); err != nil {
		return floodgate.Result{}, err
	}
	d, decided, err := l.acquire(ctx, key, n, req.MaxDelay == 0)
	if err != nil || decided {
		return l.pooled(d, n), err
	}
	l.s.forwarded.Add(1)
	res, err := l.remote.Apply(ctx, key, req, each)
	if err == nil && !res.Allowed {
		l.deniedRemotely(key, n)
	}
	return res, err
}

// deniedRemotely counts n units of key that the remote denied, for the
// demand a Fleet is told.
func (l *binding) deniedRemotely(key string, n int64) {
	if l.cfg.fleet == nil {
		return
	}
	if e, ok := l.entries.Load(key); ok {
		e.denied.Add(n)
	}
}

// pooled returns the Result of a decision made by a pool.
func (l *binding) pooled(d floodgate.Decision, n int64) floodgate.Result {
	res := floodgate.Result{Decision: d, At: time.Unix(0, l.cfg.now())}
	if d.Allowed {
		res.Granted = n
	}
	return res
}

// check returns the error of arguments no step accepts, or of a closed
// Store.
func (l *binding) check(key string, req floodgate.Request) error {
	if err := floodgate.CheckKey(key); err != nil {
		return err
	}
	if err := floodgate.CheckRequest(req, l.policy.Quota); err != nil {
		return err
	}
	return l.s.open()
}

// acquire serves n units from key's pool after waiting for a refill. It
// returns decided == false when the remote must decide: n is above
// MaxBatch, the remote had fewer units than the refill asked for (or none,
// unless final and n == 1, when the refill's denial is the decision, after
// a second refill if the first was short), or concurrent callers drained
// two refills in a row.
func (l *binding) acquire(ctx context.Context, key string, n int64, final bool) (floodgate.Decision, bool, error) {
	if n > l.cfg.maxBatch {
		return floodgate.Decision{}, false, nil
	}
	e := l.lookup(key)
	for round, retired := 0, 0; round < 2; round++ {
		if round == 0 {
			// The key may have units already: a new entry another caller
			// filled, or a refill that landed since the fast path.
			if p, left, now, ok := l.take(e, n, true); ok {
				return l.decision(p, left, now), true, nil
			}
		}
		r, err := l.startRefill(e, n, true)
		switch {
		case err == errDead && l.s.closed.Load():
			return floodgate.Decision{}, true, errClosed
		case err == errDead && retired < 8:
			// The janitor forgot the key between lookup and now.
			e = l.lookup(key)
			retired++
			round--
			continue
		case err == errDead:
			return floodgate.Decision{}, false, nil
		case err != nil:
			return floodgate.Decision{}, true, err
		case r == nil:
			// The pool held enough when the refill was sized.
			if p, left, now, ok := l.take(e, n, true); ok {
				return l.decision(p, left, now), true, nil
			}
			continue
		}
		if d, decided, err := l.await(ctx, e, r, n, final); decided {
			return d, true, err
		}
		if r.granted < r.asked && !(final && n == 1) {
			// The remote ran short: it decides n units exactly. One unit
			// waits for a second refill instead, which the callers that
			// lost this one share: the remote is likely out of units, and
			// its denial is then one round trip for all of them.
			break
		}
	}
	return floodgate.Decision{}, false, nil
}

// await waits for r, a refill of e that this caller joined (startRefill),
// and decides n units from it: decided is false when the caller must go
// on (others drained the units, or the remote ran short). Before it
// returns it tells r that this caller is done with it, having counted the
// decision it made in r, so that the round trip's Lease event reports
// exactly the decisions it served (Waited).
func (l *binding) await(ctx context.Context, e *entry, r *refill, n int64, final bool) (floodgate.Decision, bool, error) {
	defer r.joined.Done()
	select {
	case <-r.done:
	case <-ctx.Done():
		return floodgate.Decision{}, true, ctx.Err()
	}
	if r.err != nil {
		l.waitedFor(r)
		return floodgate.Decision{}, true, r.err
	}
	if p, left, now, ok := l.take(e, n, false); ok {
		l.waitedFor(r)
		return l.decision(p, left, now), true, nil
	}
	if r.granted == 0 && final && n == 1 && r.res.RetryAfter > 0 {
		// The remote had no unit: that is the decision for one unit.
		// For more units its RetryAfter (for one) would be too short.
		l.waitedFor(r)
		e.denied.Add(n)
		return floodgate.Decision{
			Limit:      l.policy.Quota,
			Remaining:  max(r.res.Remaining, 0),
			RetryAfter: r.res.RetryAfter,
			ResetAfter: r.res.ResetAfter,
		}, true, nil
	}
	return floodgate.Decision{}, false, nil
}

// waitedFor counts a decision made after waiting for r.
func (l *binding) waitedFor(r *refill) {
	l.s.waited.Add(1)
	r.decided.Add(1)
}

// lookup returns key's entry, adding one if needed.
func (l *binding) lookup(key string) *entry {
	e, _ := l.entries.LoadOrCompute(key, func() (*entry, bool) { return newEntry(l, key), false })
	return e
}
