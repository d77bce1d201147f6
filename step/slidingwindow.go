package step

import (
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/timemath"
)

// SlidingWindowState is the stored state of a sliding window counter: the
// start of the current fixed window in nanoseconds since the Unix epoch, and
// the units admitted in the window before it and in it. The zero value is the
// state of a new key.
type SlidingWindowState struct {
	Start int64
	Prev  int64
	Curr  int64
}

// swRoll moves st forward to the fixed window starting at start, if that is
// later than st's window.
func swRoll(a floodgate.SlidingWindow, st SlidingWindowState, start int64) SlidingWindowState {
	w := int64(a.Window)
	switch {
	case st.Start >= start:
		return st
	case st.Start == start-w:
		return SlidingWindowState{Start: start, Prev: st.Curr}
	default:
		return SlidingWindowState{Start: start}
	}
}

// swAvail returns Limit − est at offset e into st's window. The order of
// operations is part of the contract: the Lua script computes
// (L − curr) − prev·(W − e)/W in the same order.
func swAvail(a floodgate.SlidingWindow, st SlidingWindowState, e int64) float64 {
	w := int64(a.Window)
	return float64(a.Limit-st.Curr) - float64(st.Prev)*float64(w-e)/float64(w)
}

// swEarliest returns the smallest offset e in [from, W] into st's window at
// which n units fit, or −1 when they do not fit before the window ends.
func swEarliest(a floodgate.SlidingWindow, st SlidingWindowState, from, n int64) int64 {
	w := int64(a.Window)
	room := a.Limit - st.Curr - n
	if room < 0 {
		return -1
	}
	if float64(n) <= swAvail(a, st, from) {
		return from
	}
	// avail never decreases as e grows (each float operation is monotonic)
	// and avail(W) = Limit − Curr ≥ n, so bisect for the least e that fits:
	// at most 52 steps, where settling a closed-form guess by single
	// nanoseconds could take ~2^40 for a large Limit and a tiny Prev. The
	// Lua script (slidingwindow.lua's earliest) finds the same e another
	// way: it tries the offset solved from the linear decay and its
	// neighbour, and bisects only the side of it where e lies.
	lo, hi := from, w // avail(lo) < n ≤ avail(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if float64(n) <= swAvail(a, st, mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// swAdmitAt returns the earliest instant, at offset from or later into st's
// window, at which n units fit: in st's window, or else in the next one,
// whose previous count is st.Curr.
func swAdmitAt(a floodgate.SlidingWindow, st SlidingWindowState, from, n int64) int64 {
	if e := swEarliest(a, st, from, n); e >= 0 {
		return st.Start + e
	}
	next := swRoll(a, st, st.Start+int64(a.Window))
	return next.Start + swEarliest(a, next, 0, n)
}

// SlidingWindow is the reference transition of the sliding window counter. It returns
// the new state to store and the result; a denial returns st unchanged.
// Every Store must produce the same results.
func SlidingWindow(a floodgate.SlidingWindow, st SlidingWindowState, now time.Time, req floodgate.Request) (SlidingWindowState, floodgate.Result, error) {
	if err := a.Validate(); err != nil {
		return st, floodgate.Result{}, err
	}
	if err := checkStep(req, a.Limit, now); err != nil {
		return st, floodgate.Result{}, err
	}
	t, w := now.UnixNano(), int64(a.Window)
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Limit}}
	cur := swRoll(a, st, timemath.WindowStart(t, w))
	from := max(t-cur.Start, 0) // the offset of now, or 0 for a window reserved ahead
	remaining := func(s SlidingWindowState) int64 {
		if s.Start > t {
			return 0
		}
		return max(int64(math.Floor(swAvail(a, s, t-s.Start))), 0)
	}
	resetAfter := func(s SlidingWindowState) time.Duration {
		switch {
		case s.Curr > 0:
			return time.Duration(s.Start + 2*w - t)
		case s.Prev > 0:
			return time.Duration(s.Start + w - t)
		}
		// Empty, but a window reserved ahead (emptied by refunds) keeps the
		// current one closed until it starts.
		return nsDur(s.Start - t)
	}
	switch req.Op {
	case floodgate.OpTake:
		at := swAdmitAt(a, cur, from, req.N)
		// The admission's window is cur's, the next or the one after,
		// counted from cur's start: the window aligned to the epoch when
		// cur's is, and still cur's successor when cur's start was written
		// by a configuration of another window length (the script does the
		// same), so that cur's units are never forgotten.
		next := swRoll(a, cur, cur.Start+(at-cur.Start)/w*w)
		next.Curr += req.N
		wait := max(at-t, 0)
		if wait > maxDelayNs(req) {
			res.Remaining = remaining(cur)
			res.RetryAfter = time.Duration(wait - maxDelayNs(req))
			res.ResetAfter = resetAfter(cur)
			return st, res, nil
		}
		res.Allowed, res.Granted = true, req.N
		res.Delay = time.Duration(wait)
		res.Remaining = remaining(next)
		res.ResetAfter = resetAfter(next)
		return next, res, nil
	case floodgate.OpTakeUpTo:
		m := min(req.N, remaining(cur))
		if m == 0 {
			res.ResetAfter = resetAfter(cur)
			res.RetryAfter = time.Duration(swAdmitAt(a, cur, from, 1) - t) // when one unit fits
			return st, res, nil
		}
		next := cur
		next.Curr += m
		res.Allowed, res.Granted = true, m
		res.Remaining = remaining(next)
		res.ResetAfter = resetAfter(next)
		return next, res, nil
	default: // floodgate.OpSettle: in the counter the units were counted in.
		next := cur
		var c *int64
		switch timemath.WindowStart(req.At.UnixNano(), w) {
		case cur.Start:
			c = &next.Curr
		case cur.Start - w:
			c = &next.Prev
		}
		if c != nil {
			if req.N > 0 {
				// Up to 2·Limit units in the window, compared without
				// overflow.
				res.Granted = min(req.N, max(a.Limit-(*c-a.Limit), 0))
				*c += res.Granted
			} else {
				res.Granted = min(settleBack(req.N), *c)
				*c -= res.Granted
			}
		}
		res.Allowed = res.Granted > 0
		if !res.Allowed {
			next = st
		}
		res.Remaining = remaining(swRoll(a, next, cur.Start))
		res.ResetAfter = resetAfter(swRoll(a, next, cur.Start))
		return next, res, nil
	}
}
