package step

import (
	"fmt"
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
// limit.
func Limits(ls floodgate.Limits, m Members, now time.Time, req floodgate.Request) (floodgate.Result, error) {
	if err := CheckRequest(req, ls.Policy().Quota); err != nil {
		return floodgate.Result{}, err
	}
	// each holds every limit's Decision: the caller's, or ours.
	var own [8]floodgate.Decision // a valid Limits holds at most 8 limits
	each := req.Each
	if len(each) < len(ls) {
		each = own[:len(ls)]
	}
	res := floodgate.Result{At: now}
	switch req.Op {
	case floodgate.OpTake:
		probe := floodgate.Request{Op: floodgate.OpTake, N: req.N, MaxDelay: req.MaxDelay}
		var delay time.Duration
		denied := false
		for i := range ls {
			r, err := m.Step(i, now, probe)
			if err != nil {
				return floodgate.Result{}, err
			}
			each[i] = r.Decision
			denied = denied || !r.Allowed
			delay = max(delay, r.Delay)
		}
		if denied {
			res.Decision = bind(each[:len(ls)], false)
			return res, nil
		}
		// With no delay, every limit's take is the admission, pending.
		// Otherwise each takes the units at the instant they proceed.
		if delay > 0 {
			at := now.Add(delay)
			for i := range ls {
				r, err := m.Step(i, at, floodgate.Request{Op: floodgate.OpTake, N: req.N})
				if err != nil {
					return floodgate.Result{}, err
				}
				if !r.Allowed {
					return floodgate.Result{}, fmt.Errorf("floodgate: step: Limits[%d] denied at %v the units it admitted for then", i, at)
				}
				r.Delay = delay
				r.ResetAfter += delay
				each[i] = r.Decision
			}
		}
		keep(ls, m, req)
		res.Decision = bind(each[:len(ls)], true)
		res.Granted = req.N
		return res, nil
	case floodgate.OpTakeUpTo:
		probe := floodgate.Request{Op: floodgate.OpTakeUpTo, N: req.N}
		var granted [8]int64
		n := req.N
		for i := range ls {
			r, err := m.Step(i, now, probe)
			if err != nil {
				return floodgate.Result{}, err
			}
			each[i] = r.Decision
			granted[i] = r.Granted
			n = min(n, r.Granted)
		}
		if n == 0 {
			res.Decision = bind(each[:len(ls)], false)
			return res, nil
		}
		take := floodgate.Request{Op: floodgate.OpTake, N: n}
		for i := range ls {
			// A limit that had n units keeps its pending take up to n,
			// which leaves the state and the Result a take of n would;
			// one that had more takes n instead.
			if granted[i] == n {
				continue
			}
			r, err := m.Step(i, now, take)
			if err != nil {
				return floodgate.Result{}, err
			}
			if !r.Allowed {
				return floodgate.Result{}, fmt.Errorf("floodgate: step: Limits[%d] denied the %d units it had", i, n)
			}
			each[i] = r.Decision
		}
		keep(ls, m, req)
		res.Decision = bind(each[:len(ls)], true)
		res.Granted = n
		return res, nil
	default: // floodgate.OpSettle
		one := floodgate.Request{Op: req.Op, N: req.N, At: req.At}
		res.Granted = -1
		for i := range ls {
			r, err := m.Step(i, now, one)
			if err != nil {
				return floodgate.Result{}, err
			}
			each[i] = r.Decision
			if res.Granted < 0 || r.Granted < res.Granted {
				res.Granted = r.Granted
			}
		}
		keep(ls, m, req)
		res.Decision = bind(each[:len(ls)], true)
		res.Allowed = res.Granted > 0
		return res, nil
	}
}

// bind returns the Decision of the limit that binds, with its index: for
// an admission, the fewest units left, then the longest ResetAfter; for
// a denial, the denying limit with the longest RetryAfter. The first of
// equals binds.
func bind(each []floodgate.Decision, admitted bool) floodgate.Decision {
	b := -1
	for i, d := range each {
		switch {
		case !admitted && d.Allowed:
			continue
		case b < 0:
		case !admitted && d.RetryAfter <= each[b].RetryAfter:
			continue
		case admitted && (d.Remaining > each[b].Remaining || d.Remaining == each[b].Remaining && d.ResetAfter <= each[b].ResetAfter):
			continue
		}
		b = i
	}
	d := each[b]
	d.Binding = b
	if !admitted {
		d.Allowed, d.Delay = false, 0
	}
	return d
}

// keep stores every limit's pending state, unless req is a check.
func keep(ls floodgate.Limits, m Members, req floodgate.Request) {
	if req.Check {
		return
	}
	for i := range ls {
		m.Keep(i)
	}
}
