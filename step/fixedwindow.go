package step

import (
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/take"
	"github.com/floodgate-go/floodgate/internal/timemath"
)

// FixedWindowState is the stored state of a fixed window: the start of the
// window the count belongs to, in nanoseconds since the Unix epoch, and the
// units admitted in it. The zero value is the state of a new key.
type FixedWindowState struct {
	Start int64
	Count int64
}

// FixedWindow is the reference transition of the fixed window. It returns the new
// state to store and the result; a denial returns st unchanged. Every Store
// must produce the same results.
func FixedWindow(a floodgate.FixedWindow, st FixedWindowState, now time.Time, req floodgate.Request) (FixedWindowState, floodgate.Result, error) {
	if err := a.Validate(); err != nil {
		return st, floodgate.Result{}, err
	}
	if err := checkStep(req, a.Limit, now); err != nil {
		return st, floodgate.Result{}, err
	}
	t, w := now.UnixNano(), int64(a.Window)
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Limit}}
	cur := st
	if start := timemath.WindowStart(t, w); cur.Start < start {
		cur = FixedWindowState{Start: start}
	}
	// cur.Start > the current window when a reservation reached ahead: the
	// current window is closed.
	open := cur.Start <= t
	remaining := func(s FixedWindowState) int64 {
		if s.Start > t {
			return 0
		}
		return max(a.Limit-s.Count, 0) // negative after the Limit of a live key is lowered
	}
	resetAfter := func(s FixedWindowState) time.Duration {
		if s.Count == 0 {
			// Empty, but a window reserved ahead (emptied by refunds) keeps
			// the current one closed until it starts.
			return nsDur(s.Start - t)
		}
		return time.Duration(s.Start + w - t)
	}
	switch req.Op {
	case floodgate.OpTake:
		start, count, remaining, wait, reset, ok := take.Window(st.Start, st.Count, t, req.N, a.Limit, w, maxDelayNs(req))
		res.Remaining, res.ResetAfter = remaining, time.Duration(reset)
		if !ok {
			res.RetryAfter = time.Duration(wait)
			return st, res, nil
		}
		res.Allowed, res.Granted, res.Delay = true, req.N, time.Duration(wait)
		return FixedWindowState{Start: start, Count: count}, res, nil
	case floodgate.OpTakeUpTo:
		m := int64(0)
		if open {
			m = min(req.N, a.Limit-cur.Count)
		}
		if m <= 0 {
			res.Remaining = remaining(cur)
			res.RetryAfter = time.Duration(cur.Start + w - t)
			if !open {
				// The next admission is at the start of the reserved window
				// if it has room, else at the start of the one after.
				res.RetryAfter = time.Duration(cur.Start - t)
				if cur.Count == a.Limit {
					res.RetryAfter += time.Duration(w)
				}
			}
			res.ResetAfter = resetAfter(cur)
			return st, res, nil
		}
		next := FixedWindowState{Start: cur.Start, Count: cur.Count + m}
		res.Allowed, res.Granted = true, m
		res.Remaining = remaining(next)
		res.ResetAfter = resetAfter(next)
		return next, res, nil
	default: // floodgate.OpSettle: only in the window the units were counted in.
		next := cur
		if at := timemath.WindowStart(req.At.UnixNano(), w); at == cur.Start {
			res.Granted, next.Count = settleCount(a.Limit, cur.Count, req.N)
			res.Allowed = res.Granted > 0
		}
		res.Remaining = remaining(next)
		res.ResetAfter = resetAfter(next)
		if res.Granted == 0 {
			return st, res, nil
		}
		return next, res, nil
	}
}
