package step

import (
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Members is a store's view of the states of one Limits on one key, for
// Limits. The store holds them still (a lock, a script) while Limits
// runs.
type Members interface {
	// Step runs req for the i-th limit at the instant at on its stored
	// state with the limit's reference transition, and holds the new
	// state pending: the stored state stays as it was until Keep(i).
	Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error)
	// Keep stores the state the last Step of the i-th limit left pending.
	Keep(i int)
}

// Limits is the reference transition of a floodgate.Limits composite,
// over the limits' own transitions, which m runs. Every Store must produce
// the same results; see floodgate.Limits for the semantics. ls must be
// valid (a store validates it when it binds).
//
// A take runs each limit's take at now with the request's MaxDelay. If
// one denies, nothing is kept. Otherwise the units proceed after the
// longest of the delays, and each limit counts them at that instant: its
// take again there, with no delay, which admits (every limit's admission
// only gets easier as time passes with nothing else taken). A take up to
// n takes the fewest units any limit has, a settlement settles each
// limit. Each limit's own Decision is written to each when it has room
// for all of them, as floodgate.Bound.Apply says.
func Limits(ls floodgate.Limits, m Members, now time.Time, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	// Each limit's transition checks req (a take above the smallest quota
	// is that limit's ErrExceedsLimit) before any state is kept. A take up
	// to n and a settlement pass the limits no MaxDelay, so a negative one
	// is refused here, as floodgate.CheckRequest refuses it for every op.
	if req.MaxDelay < 0 {
		return floodgate.Result{}, floodgate.CheckRequest(req, math.MaxInt64)
	}
	if len(each) < len(ls) {
		each = nil
	}
	res := floodgate.Result{At: now}
	switch req.Op {
	case floodgate.OpTake:
		probe := floodgate.Request{Op: floodgate.OpTake, N: req.N, MaxDelay: req.MaxDelay}
		var delay time.Duration
		var deny, admit Pick
		for i := range ls {
			r, err := m.Step(i, now, probe)
			if err != nil {
				return floodgate.Result{}, err
			}
			if each != nil {
				each[i] = r.Decision
			}
			if !r.Allowed {
				deny.Denial(i, &r.Decision)
			} else {
				admit.Admission(i, &r.Decision)
			}
			delay = max(delay, r.Delay)
		}
		if deny.ok {
			res.Decision = deny.d
			return res, nil
		}
		// With no delay, every limit's take is the admission, pending.
		// Otherwise each takes the units at the instant they proceed.
		if delay > 0 {
			admit = Pick{}
			at := now.Add(delay)
			for i := range ls {
				r, err := m.Step(i, at, floodgate.Request{Op: floodgate.OpTake, N: req.N})
				if err != nil {
					return floodgate.Result{}, err
				}
				if !r.Allowed {
					return floodgate.Result{}, fmt.Errorf("floodgate: step: Limits[%d] denied at %d ns the units it admitted for then", i, at.UnixNano())
				}
				r.Delay = delay
				r.ResetAfter += delay
				if each != nil {
					each[i] = r.Decision
				}
				admit.Admission(i, &r.Decision)
			}
		}
		keep(ls, m, req)
		res.Decision = admit.d
		res.Granted = req.N
		return res, nil
	case floodgate.OpTakeUpTo:
		var ds [8]floodgate.Decision // a valid Limits holds at most 8 limits
		var granted [8]int64
		n := req.N
		var deny Pick
		for i := range ls {
			r, err := m.Step(i, now, floodgate.Request{Op: floodgate.OpTakeUpTo, N: req.N})
			if err != nil {
				return floodgate.Result{}, err
			}
			ds[i], granted[i] = r.Decision, r.Granted
			if r.Granted == 0 {
				deny.Denial(i, &r.Decision)
			}
			n = min(n, r.Granted)
		}
		if deny.ok {
			copy(each, ds[:len(ls)])
			res.Decision = deny.d
			return res, nil
		}
		var admit Pick
		for i := range ls {
			// A limit that had n units keeps its pending take up to n,
			// which leaves the state and the Result a take of n would;
			// one that had more takes n instead.
			if granted[i] > n {
				r, err := m.Step(i, now, floodgate.Request{Op: floodgate.OpTake, N: n})
				if err != nil {
					return floodgate.Result{}, err
				}
				if !r.Allowed {
					return floodgate.Result{}, fmt.Errorf("floodgate: step: Limits[%d] denied the %d units it had", i, n)
				}
				ds[i] = r.Decision
			}
			admit.Admission(i, &ds[i])
		}
		copy(each, ds[:len(ls)])
		keep(ls, m, req)
		res.Decision = admit.d
		res.Granted = n
		return res, nil
	default: // floodgate.OpSettle
		one := floodgate.Request{Op: req.Op, N: req.N, At: req.At}
		var fewest Pick
		res.Granted = -1
		for i := range ls {
			r, err := m.Step(i, now, one)
			if err != nil {
				return floodgate.Result{}, err
			}
			if each != nil {
				each[i] = r.Decision
			}
			fewest.Admission(i, &r.Decision)
			if res.Granted < 0 || r.Granted < res.Granted {
				res.Granted = r.Granted
			}
		}
		keep(ls, m, req)
		res.Decision = fewest.d
		res.Allowed = res.Granted > 0
		return res, nil
	}
}

// Pick chooses the limit whose Decision a Limits reports, as Limits
// does, for a store that decides some steps without it (memstore's Take):
// offer each limit's Decision, then read the chosen one, whose Binding is
// its index. The first of equals binds.
type Pick struct {
	d  floodgate.Decision
	ok bool
}

// Denial offers the denial d of limit i: the longest RetryAfter binds.
func (p *Pick) Denial(i int, d *floodgate.Decision) {
	if !p.ok || d.RetryAfter > p.d.RetryAfter {
		p.d, p.ok = *d, true
		p.d.Binding = i
	}
}

// Admission offers the Decision d of limit i that admitted (or, for a
// settlement, settled): the fewest units left bind, then the longest
// ResetAfter.
func (p *Pick) Admission(i int, d *floodgate.Decision) {
	if !p.ok || d.Remaining < p.d.Remaining || d.Remaining == p.d.Remaining && d.ResetAfter > p.d.ResetAfter {
		p.d, p.ok = *d, true
		p.d.Binding = i
	}
}

// Decision returns the chosen Decision, and whether any was offered.
func (p *Pick) Decision() (floodgate.Decision, bool) { return p.d, p.ok }

// keep stores every limit's pending state, unless req is a check.
func keep(ls floodgate.Limits, m Members, req floodgate.Request) {
	if req.Check {
		return
	}
	for i := range ls {
		m.Keep(i)
	}
}
