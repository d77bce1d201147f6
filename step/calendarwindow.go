package step

import (
	"time"

	"github.com/floodgate-go/floodgate"
)

// CalendarWindow is the reference transition of the calendar window, a
// fixed window whose boundaries are those of a.Window: FixedWindow's
// transition with the window holding an instant in place of the
// epoch-aligned one. Its state is a FixedWindowState (the start of the
// window the count belongs to, and the count), kept under its own kind,
// KindCalendarWindow.
// It returns the new state to store and the result; a denial returns st
// unchanged. Every Store must produce the same results.
//
// A state whose start is not a boundary of a (written by another
// configuration of the kind) counts in the window holding its start.
func CalendarWindow(a floodgate.CalendarWindow, st FixedWindowState, now time.Time, req floodgate.Request) (FixedWindowState, floodgate.Result, error) {
	if err := a.Validate(); err != nil {
		return st, floodgate.Result{}, err
	}
	if err := checkStep(req, a.Limit, now); err != nil {
		return st, floodgate.Result{}, err
	}
	t := now.UnixNano()
	start, stop := a.Window(now)
	ws, we := start.UnixNano(), stop.UnixNano()
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Limit}}
	cur := st
	if cur.Start < ws {
		cur = FixedWindowState{Start: ws}
	}
	// end returns the end of the window holding the instant s (ns): the
	// current window's without computing it again.
	end := func(s int64) int64 {
		if ws <= s && s < we {
			return we
		}
		_, e := a.Window(time.Unix(0, s))
		return e.UnixNano()
	}
	// cur.Start > now when a reservation reached ahead: the current window
	// is closed.
	open := cur.Start <= t
	remaining := func(s FixedWindowState) int64 {
		if s.Start > t {
			return 0
		}
		return max(a.Limit-s.Count, 0)
	}
	resetAfter := func(s FixedWindowState) time.Duration {
		if s.Count == 0 {
			return nsDur(s.Start - t)
		}
		return time.Duration(end(s.Start) - t)
	}
	switch req.Op {
	case floodgate.OpTake:
		maxd := maxDelayNs(req)
		var wait int64
		if req.N <= a.Limit-cur.Count {
			// Into cur's window, when it starts within maxDelay.
			if wait = max(cur.Start-t, 0); wait <= maxd {
				next := FixedWindowState{Start: cur.Start, Count: cur.Count + req.N}
				res.Allowed, res.Granted, res.Delay = true, req.N, time.Duration(wait)
				res.Remaining = remaining(next)
				res.ResetAfter = time.Duration(end(cur.Start) - t)
				return next, res, nil
			}
		} else {
			// Into the window after cur's.
			e := end(cur.Start)
			if wait = e - t; wait <= maxd {
				res.Allowed, res.Granted, res.Delay = true, req.N, time.Duration(wait)
				res.ResetAfter = time.Duration(end(e) - t)
				return FixedWindowState{Start: e, Count: req.N}, res, nil
			}
		}
		res.Remaining = remaining(cur)
		res.RetryAfter = time.Duration(wait - maxd)
		res.ResetAfter = resetAfter(cur)
		return st, res, nil
	case floodgate.OpTakeUpTo:
		m := int64(0)
		if open {
			m = min(req.N, a.Limit-cur.Count)
		}
		if m <= 0 {
			res.Remaining = remaining(cur)
			// The next admission: at the start of a window reserved ahead
			// that has room, else when cur's window ends.
			if !open && cur.Count < a.Limit {
				res.RetryAfter = time.Duration(cur.Start - t)
			} else {
				res.RetryAfter = time.Duration(end(cur.Start) - t)
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
		if as, _ := a.Window(req.At); as.UnixNano() <= cur.Start && cur.Start < end(as.UnixNano()) {
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
