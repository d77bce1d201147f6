package floodgate

import (
	"fmt"
	"math"
	"time"
)

// SlidingWindow approximates a sliding window with two counters, as
// Cloudflare described in "How we built rate limiting capable of scaling to
// millions of domains" (2017): the count of the previous fixed window,
// weighted by the share of it still inside the sliding window, plus the
// count of the current one,
//
//	est = prev·(1 − f) + curr, f the elapsed fraction of the current window,
//
// and a request of n units is admitted when est + n ≤ Limit. It costs two
// counters per key, where SlidingLog keeps an entry per admitted unit, but
// it is not exact: the estimate assumes the previous window's traffic was
// spread evenly. It admits at most Limit units per fixed window (est ≥
// curr) and at most 2·Limit − 1 in any window of length Window; a client
// that sends Limit units just before a window boundary and then retries
// when RetryAfter says gets exactly 2·Limit − 1 through one window. On
// Poisson traffic at 1× and 1.2× a Limit of 100, 11.82% and 16.35% of its
// admissions would be denied by an exact window (docs/algorithms.md gives
// the table by traffic shape and the command, in the bench module). Use
// SlidingLog where the limit must hold in every window.
//
// Remaining, RetryAfter and ResetAfter follow the estimate: RetryAfter is
// the earliest instant at which est + n ≤ Limit, found by solving the linear
// decay of the previous window's weight.
//
// The estimate is computed in float64 in a fixed order of operations that the
// Lua script repeats, so both stores decide alike.
//
// Reserve admits at the earliest instant within maxDelay at which the
// estimate has room, possibly in the next window; as for FixedWindow, once a
// reservation reaches into the next window, the current one admits no more.
//
// The zero value is not usable; SlidingWindow is a plain value, safe to copy
// and to share.
type SlidingWindow struct {
	// Limit is the number of units admitted per sliding window; at least 1
	// and at most 2^53, so that the float64 estimate counts units exactly.
	Limit int64
	// Window is the window length: positive, a whole number of microseconds
	// and at most MaxWindow.
	Window time.Duration
}

// SlidingWindowState is the stored state of a sliding window counter: the
// start of the current fixed window in nanoseconds since the Unix epoch, and
// the units admitted in the window before it and in it. The zero value is the
// state of a new key.
type SlidingWindowState struct {
	Start int64
	Prev  int64
	Curr  int64
}

var _ Algorithm = SlidingWindow{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a SlidingWindow) Validate() error { return checkWindow(a.Limit, a.Window) }

// Policy returns Limit units per Window.
func (a SlidingWindow) Policy() Policy { return windowPolicy(a.Limit, a.Window) }

// Kind returns KindSlidingWindow.
func (a SlidingWindow) Kind() Kind { return KindSlidingWindow }

// roll moves st forward to the fixed window starting at start, if that is
// later than st's window.
func (a SlidingWindow) roll(st SlidingWindowState, start int64) SlidingWindowState {
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

// avail returns Limit − est at offset e into st's window. The order of
// operations is part of the contract: the Lua script computes
// (L − curr) − prev·(W − e)/W in the same order.
func (a SlidingWindow) avail(st SlidingWindowState, e int64) float64 {
	w := int64(a.Window)
	return float64(a.Limit-st.Curr) - float64(st.Prev)*float64(w-e)/float64(w)
}

// earliest returns the smallest offset e in [from, W] into st's window at
// which n units fit, or −1 when they do not fit before the window ends.
func (a SlidingWindow) earliest(st SlidingWindowState, from, n int64) int64 {
	w := int64(a.Window)
	room := a.Limit - st.Curr - n
	if room < 0 {
		return -1
	}
	if float64(n) <= a.avail(st, from) {
		return from
	}
	// avail never decreases as e grows (each float operation is monotonic)
	// and avail(W) = Limit − Curr ≥ n, so bisect for the least e that fits:
	// at most 52 steps, where settling a closed-form guess by single
	// nanoseconds could take ~2^40 for a large Limit and a tiny Prev. The
	// Lua script bisects the same interval the same way.
	lo, hi := from, w // avail(lo) < n ≤ avail(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if float64(n) <= a.avail(st, mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// admitAt returns the earliest instant, at offset from or later into st's
// window, at which n units fit: in st's window, or else in the next one,
// whose previous count is st.Curr.
func (a SlidingWindow) admitAt(st SlidingWindowState, from, n int64) int64 {
	if e := a.earliest(st, from, n); e >= 0 {
		return st.Start + e
	}
	next := a.roll(st, st.Start+int64(a.Window))
	return next.Start + a.earliest(next, 0, n)
}

// Step is the reference transition of the sliding window counter. It returns
// the new state to store and the result; a denial returns st unchanged.
// Every Store must produce the same results.
func (a SlidingWindow) Step(st SlidingWindowState, now time.Time, req Request) (SlidingWindowState, Result, error) {
	if err := a.Validate(); err != nil {
		return st, Result{}, err
	}
	if err := checkStep(req, a.Limit, now); err != nil {
		return st, Result{}, err
	}
	t, w := now.UnixNano(), int64(a.Window)
	res := Result{At: now, Decision: Decision{Limit: a.Limit}}
	cur := a.roll(st, windowStart(t, w))
	from := max(t-cur.Start, 0) // the offset of now, or 0 for a window reserved ahead
	remaining := func(s SlidingWindowState) int64 {
		if s.Start > t {
			return 0
		}
		return max(int64(math.Floor(a.avail(s, t-s.Start))), 0)
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
	case OpTake:
		at := a.admitAt(cur, from, req.N)
		next := a.roll(cur, windowStart(at, w))
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
	case OpTakeUpTo:
		m := min(req.N, remaining(cur))
		if m == 0 {
			res.ResetAfter = resetAfter(cur)
			res.RetryAfter = time.Duration(a.admitAt(cur, from, 1) - t) // when one unit fits
			return st, res, nil
		}
		next := cur
		next.Curr += m
		res.Allowed, res.Granted = true, m
		res.Remaining = remaining(next)
		res.ResetAfter = resetAfter(next)
		return next, res, nil
	default: // OpRefund: into the counter the units were counted in.
		next := cur
		switch windowStart(req.At.UnixNano(), w) {
		case cur.Start:
			res.Granted = min(req.N, cur.Curr)
			next.Curr -= res.Granted
		case cur.Start - w:
			res.Granted = min(req.N, cur.Prev)
			next.Prev -= res.Granted
		}
		res.Allowed = res.Granted > 0
		if !res.Allowed {
			next = st
		}
		res.Remaining = remaining(a.roll(next, cur.Start))
		res.ResetAfter = resetAfter(a.roll(next, cur.Start))
		return next, res, nil
	}
}

// String describes the configuration, e.g. "SlidingWindow{100 per 1m0s}".
func (a SlidingWindow) String() string {
	return fmt.Sprintf("SlidingWindow{%d per %v}", a.Limit, a.Window)
}
