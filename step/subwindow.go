package step

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/timemath"
)

// SubWindowState is the stored state of a sliding window with
// sub-windows (floodgate.SlidingWindow with SubWindows ≥ 2), with counts
// of 8 bytes, which hold any count: see SubWindowOf.
type SubWindowState = SubWindowOf[int64]

// SubCount is the integer type of a SubWindowOf's counts.
type SubCount interface{ ~uint32 | ~int64 }

// SubWindowOf is the stored state of a sliding window with sub-windows:
// the counts of the S+1 newest sub-windows, Newest−S to Newest,
// sub-window j's at Counts[j mod (S+1)], their sum, and the sub-window
// length they were counted in. A sub-window j is the interval [j·Sub,
// (j+1)·Sub) in nanoseconds since the Unix epoch. The zero value is the
// state of a new key.
//
// Newest is the newest sub-window admitted into, which is ahead of the
// current one after a reservation. A count stays in Total until its
// sub-window is S+1 sub-windows old.
//
// Every count is at most Total, and a step adds at most its request's N
// to Total, so a state of uint32 counts (half the memory) serves a step
// exactly when its Total plus the request's N is at most math.MaxUint32;
// SubWindow refuses the step otherwise (ErrCountRange), and its caller
// moves the state to 8-byte counts (Widen).
type SubWindowOf[C SubCount] struct {
	Newest int64
	Total  int64
	Sub    int64
	Counts []C
}

// ErrCountRange is SubWindow's error for a step whose counts might not fit
// the state's count type.
var ErrCountRange = errors.New("step: sub-window counts might not fit their type")

// Widen returns st with 8-byte counts.
func (st SubWindowOf[C]) Widen() SubWindowState {
	w := SubWindowState{Newest: st.Newest, Total: st.Total, Sub: st.Sub}
	if st.Counts != nil {
		w.Counts = make([]int64, len(st.Counts))
		for i, c := range st.Counts {
			w.Counts[i] = int64(c)
		}
	}
	return w
}

// countMax returns the largest count C holds.
func countMax[C SubCount]() int64 {
	var z C
	if m := ^z; m > z {
		return int64(m)
	}
	return math.MaxInt64
}

// Clone returns a copy of st that shares no memory with it.
func (st SubWindowOf[C]) Clone() SubWindowOf[C] {
	st.Counts = append([]C(nil), st.Counts...)
	return st
}

// Equal reports whether st and o are the same state.
func (st SubWindowOf[C]) Equal(o SubWindowOf[C]) bool {
	if st.Newest != o.Newest || st.Total != o.Total || st.Sub != o.Sub || len(st.Counts) != len(o.Counts) {
		return false
	}
	for i, c := range st.Counts {
		if o.Counts[i] != c {
			return false
		}
	}
	return true
}

// slot returns the position of sub-window j in st.Counts.
func (st *SubWindowOf[C]) slot(j int64) int {
	n := int64(len(st.Counts))
	return int(((j % n) + n) % n)
}

// LastCounted returns the newest sub-window whose count is not zero, and
// false when the state counts nothing.
func (st *SubWindowOf[C]) LastCounted() (int64, bool) {
	if st.Total == 0 {
		return 0, false
	}
	s := int64(len(st.Counts)) - 1
	for j := st.Newest; j >= st.Newest-s; j-- {
		if st.Counts[st.slot(j)] != 0 {
			return j, true
		}
	}
	return 0, false
}

// subFit makes st a state of s+1 counts of sub-windows of g ns: st itself
// when it is one, else a new state holding st's whole total in the
// sub-window of g holding the last instant of st's newest sub-window, so
// that every unit stays counted at least as long as it would have been
// (a configuration changed under a name).
func subFit[C SubCount](st *SubWindowOf[C], s int, g int64) {
	if st.Sub == g && len(st.Counts) == s+1 {
		return
	}
	counts := make([]C, s+1)
	var newest int64
	if st.Total > 0 && st.Sub > 0 {
		newest = timemath.FloorDiv((st.Newest+1)*st.Sub-1, g)
	}
	*st = SubWindowOf[C]{Newest: newest, Total: st.Total, Sub: g, Counts: counts}
	st.Counts[st.slot(newest)] = C(st.Total)
}

// subAdvance moves st's newest sub-window to m > st.Newest, with c the
// current sub-window: the counts of sub-windows that leave the S+1 kept
// ones are dropped when they are dead at c (older than c−S), and added to
// the oldest kept sub-window, m−S, when they are still counted at c. The
// loop visits every kept sub-window when m is more than S ahead, so the
// sub-windows after Newest start at zero.
func subAdvance[C SubCount](st *SubWindowOf[C], m, c int64) {
	s := int64(len(st.Counts)) - 1
	var fold int64
	for j := st.Newest - s; j <= min(st.Newest, m-s-1); j++ {
		i := st.slot(j)
		if v := int64(st.Counts[i]); v != 0 {
			st.Counts[i] = 0
			if j < c-s {
				st.Total -= v
			} else {
				fold += v
			}
		}
	}
	st.Newest = m
	st.Counts[st.slot(m-s)] += C(fold)
}

// subEarliest returns the earliest sub-window after st.Newest at whose
// start n more units fit, the counts of the sub-windows older than it by
// more than S having left; −1 when none does (n > limit).
func subEarliest[C SubCount](st *SubWindowOf[C], limit, n int64) int64 {
	s := int64(len(st.Counts)) - 1
	total := st.Total
	for j := st.Newest - s; j <= st.Newest; j++ {
		total -= int64(st.Counts[st.slot(j)])
		if total+n <= limit {
			return j + s + 1
		}
	}
	return -1
}

// SubWindow is the reference transition of the sliding window with
// sub-windows (floodgate.SlidingWindow with SubWindows ≥ 2). It changes st
// in place and returns the result; with req.Check it leaves st as it was.
// A step that admits nothing still moves st to the current sub-window
// (dropping the counts that left), which changes no decision.
//
// A take of n units at sub-window c is admitted now when the units counted
// (every sub-window from c−S to the newest) plus n are at most Limit, and
// counted in sub-window c (or in the oldest kept one, Newest−S, when a
// reservation has moved the kept sub-windows past c−S). Otherwise it is
// admitted at the start of the first later sub-window at which enough
// counts have left, when that is within MaxDelay and the units counted
// now plus n are at most 2·Limit (the counts a reservation moves forward
// stay counted: the bound keeps them finite). OpTakeUpTo takes what fits
// now. OpSettle charges (up to a total of 2·Limit) or gives back in the
// sub-window of At, when it is still counted.
//
// Remaining is Limit minus the units counted, RetryAfter the time until
// the take would be admitted (the start of the first sub-window at which
// it fits, less MaxDelay, or later while the 2·Limit bound holds it back),
// and ResetAfter the time until the newest counted sub-window leaves.
func SubWindow[C SubCount](a floodgate.SlidingWindow, st *SubWindowOf[C], now time.Time, req floodgate.Request) (floodgate.Result, error) {
	if err := a.Validate(); err != nil {
		return floodgate.Result{}, err
	}
	if a.SubWindows < 2 {
		return floodgate.Result{}, fmt.Errorf("%w: step.SubWindow needs SubWindows of 2 or more, got %d", floodgate.ErrInvalidConfig, a.SubWindows)
	}
	if err := checkStep(req, a.Limit, now); err != nil {
		return floodgate.Result{}, err
	}
	if st.Total > countMax[C]()-max(req.N, 0) {
		return floodgate.Result{}, ErrCountRange
	}
	s, g := int64(a.SubWindows), int64(a.Window)/int64(a.SubWindows)
	t := now.UnixNano()
	c := timemath.FloorDiv(t, g)
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Limit}}

	cur := st
	if req.Check {
		cp := st.Clone()
		cur = &cp
	}
	subFit(cur, int(s), g)
	if c > cur.Newest {
		subAdvance(cur, c, c)
	}
	// into is the sub-window an admission now is counted in.
	into := max(c, cur.Newest-s)
	switch req.Op {
	case floodgate.OpTake:
		if cur.Total+req.N <= a.Limit {
			cur.Counts[cur.slot(into)] += C(req.N)
			cur.Total += req.N
			res.Allowed, res.Granted = true, req.N
			break
		}
		m := subEarliest(cur, a.Limit, req.N)
		wait := m*g - t
		retry := wait - maxDelayNs(req)
		if cur.Total+req.N > 2*a.Limit {
			retry = max(retry, subEarliest(cur, 2*a.Limit, req.N)*g-t)
		}
		if retry > 0 {
			res.RetryAfter = time.Duration(retry)
			break
		}
		subAdvance(cur, m, c)
		cur.Counts[cur.slot(m)] += C(req.N)
		cur.Total += req.N
		res.Allowed, res.Granted, res.Delay = true, req.N, time.Duration(wait)
	case floodgate.OpTakeUpTo:
		got := min(req.N, max(a.Limit-cur.Total, 0))
		if got == 0 {
			res.RetryAfter = time.Duration(subEarliest(cur, a.Limit, 1)*g - t)
			break
		}
		cur.Counts[cur.slot(into)] += C(got)
		cur.Total += got
		res.Allowed, res.Granted = true, got
	default: // floodgate.OpSettle: in the sub-window of At while it is counted.
		if j := timemath.FloorDiv(req.At.UnixNano(), g); j >= c-s && j <= cur.Newest {
			i := cur.slot(max(j, cur.Newest-s))
			if req.N > 0 {
				res.Granted = min(req.N, max(2*a.Limit-cur.Total, 0))
				cur.Counts[i] += C(res.Granted)
				cur.Total += res.Granted
			} else {
				res.Granted = min(settleBack(req.N), int64(cur.Counts[i]))
				cur.Counts[i] -= C(res.Granted)
				cur.Total -= res.Granted
			}
		}
		res.Allowed = res.Granted > 0
	}
	res.Remaining = max(a.Limit-cur.Total, 0)
	if j, ok := cur.LastCounted(); ok {
		res.ResetAfter = nsDur((j+s+1)*g - t)
	}
	return res, nil
}
