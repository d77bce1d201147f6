package memstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keytable"
	"github.com/floodgate-go/floodgate/internal/take"
	"github.com/floodgate-go/floodgate/internal/timemath"
	"github.com/floodgate-go/floodgate/step"
)

// limitsEntry is the state of a key's Limits.
type limitsEntry struct {
	lockedEntry // first: see asWord
	st          limitsState
}

// limitsState is the state of a key's Limits: one slot per limit kind and
// ordinal (the i-th limit of a kind in a Limits), shared by every Limits
// bound to the store under one name. It is the step.Members of the bound that holds the
// entry's lock: run and idx are set under it.
type limitsState struct {
	slots []limitSlot
	run   *limitsBound
	idx   [8]uint8 // the slot of each of run's limits
}

// limitSlot is one limit's state: a bucket's word in s[0], a fixed
// window's start and count in s[0:2], a sliding window's start, previous
// and current counts in s[0:3], or a sliding log; p holds what a Step
// left pending.
type limitSlot struct {
	kind step.Kind
	ord  uint8
	s, p [3]int64
	sl   *slSlot
}

// slSlot is a sliding log's state and the step its Keep runs again: the
// log changes in place, so a Step only reports, and Keep applies.
type slSlot struct {
	st  step.SlidingLogState
	at  time.Time
	req floodgate.Request
}

// limitsBound runs one Limits configuration.
type limitsBound struct {
	t     *lockedTable
	sc    keytable.Scope
	ls    floodgate.Limits
	kinds [8]step.Kind
	ords  [8]uint8
	// The commonest kinds as values, so that a step needs no type
	// assertion: the token buckets (normalized as tbBound's) and fixed
	// windows, by limit.
	tb  [8]floodgate.TokenBucket
	tau [8]int64 // the token buckets' tolerance, Burst intervals
	fw  [8]floodgate.FixedWindow
	// quota is the smallest quota: a take of more is ErrExceedsLimit.
	quota int64
}

func (s *Store) bindLimits(sc keytable.Scope, ls floodgate.Limits) (*limitsBound, error) {
	t := lazy(s, &s.lim, func() *lockedTable {
		return newLockedTable(s, func() *keytable.Entry { return &new(limitsEntry).Entry },
			func(e *lockedEntry, w int64) (int64, int64) { return limitsHeld(e.limits(), w) })
	})
	b := &limitsBound{t: t, sc: sc, ls: ls, quota: ls.Policy().Quota}
	var next [step.KindCalendarWindow + 1]uint8
	for i, a := range ls {
		k, err := step.KindOf(a)
		if err != nil {
			return nil, fmt.Errorf("memstore: Limits[%d]: %w", i, err)
		}
		b.kinds[i], b.ords[i] = k, next[k]
		next[k]++
		switch a := a.(type) {
		case floodgate.TokenBucket:
			tau := a.Policy().Window
			a.Per, a.Rate = tau/time.Duration(a.Burst), 1
			b.tb[i], b.tau[i] = a, int64(tau)
		case floodgate.FixedWindow:
			b.fw[i] = a
		case floodgate.CalendarWindow:
			raise(&t.maxW, timemath.MaxCalendarWindow)
			continue
		}
		raise(&t.maxW, int64(a.Policy().Window))
	}
	return b, nil
}

// Apply executes one step of the Limits on key; see floodgate.Bound. The
// limits decide under the key's one lock.
func (b *limitsBound) Apply(_ context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	return b.t.apply(&b.sc, key, func(e *lockedEntry, now time.Time) (floodgate.Result, error) {
		st := e.limits()
		st.bind(b)
		res, err := step.Limits(b.ls, st, now, req, each)
		st.run = nil
		return res, err
	})
}

// Take is Apply of a plain take, decided as step.Limits decides it (every
// limit's take at now; kept only if all admit) with the token buckets' and
// fixed windows' arithmetic on scalars, as their own Takes run it: a
// Result is eleven words, copied through memory at every call, and a
// composite of two limits made four such copies a decision (measured:
// 290 ns against 67 for the token bucket alone). The floodgatetest cases
// hold Take and Apply to the same decisions. Bad arguments and a clock
// outside 1970 to 2255 take Apply's path, which reports them.
func (b *limitsBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if !floodgate.ValidTake(key, n, b.quota) {
		return b.slowTake(ctx, key, n)
	}
	e := b.t.entry(&b.sc, key)
	now, ok := b.t.s.stepNow()
	if !ok {
		e.mu.Unlock()
		return b.slowTake(ctx, key, n)
	}
	d, err := b.take(e.limits(), now, n)
	e.mu.Unlock()
	return d, err
}

func (b *limitsBound) slowTake(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// take takes n units from every limit of st at the instant t (ns), or
// none; the caller holds the entry's lock and has checked n.
func (b *limitsBound) take(st *limitsState, t, n int64) (floodgate.Decision, error) {
	st.bind(b)
	var deny, admit step.Pick
	for i := range b.ls {
		sl := &st.slots[st.idx[i]]
		var d floodgate.Decision
		switch b.kinds[i] {
		case step.KindTokenBucket:
			a := &b.tb[i]
			next, remaining, wait, reset, ok := take.Bucket(sl.s[0], t, n, int64(a.Per), b.tau[i], 0)
			sl.p[0] = next
			d = floodgate.Decision{Allowed: ok, Limit: a.Burst, Remaining: remaining, ResetAfter: time.Duration(reset)}
			if !ok {
				d.RetryAfter = time.Duration(wait)
			}
		case step.KindCalendarWindow:
			res, err := st.Step(i, time.Unix(0, t), floodgate.Request{Op: floodgate.OpTake, N: n})
			if err != nil {
				st.run = nil
				return floodgate.Decision{}, err
			}
			d = res.Decision
		case step.KindFixedWindow:
			a := &b.fw[i]
			start, count, remaining, wait, reset, ok := take.Window(sl.s[0], sl.s[1], t, n, a.Limit, int64(a.Window), 0)
			sl.p[0], sl.p[1] = start, count
			d = floodgate.Decision{Allowed: ok, Limit: a.Limit, Remaining: remaining, ResetAfter: time.Duration(reset)}
			if !ok {
				d.RetryAfter = time.Duration(wait)
			}
		default:
			res, err := st.Step(i, time.Unix(0, t), floodgate.Request{Op: floodgate.OpTake, N: n})
			if err != nil {
				st.run = nil
				return floodgate.Decision{}, err
			}
			d = res.Decision
		}
		if d.Allowed {
			admit.Admission(i, &d)
		} else {
			deny.Denial(i, &d)
		}
	}
	if d, ok := deny.Decision(); ok {
		st.run = nil
		return d, nil
	}
	for i := range b.ls {
		st.Keep(i)
	}
	st.run = nil
	d, _ := admit.Decision()
	return d, nil
}

// bind points st at b's limits, adding the slots the key lacks.
func (st *limitsState) bind(b *limitsBound) {
	st.run = b
	for i := range b.ls {
		j := st.slot(b.kinds[i], b.ords[i])
		st.idx[i] = uint8(j)
	}
}

// slot returns the index of the slot of (kind, ord), adding it if needed.
func (st *limitsState) slot(kind step.Kind, ord uint8) int {
	for j := range st.slots {
		if sl := &st.slots[j]; sl.kind == kind && sl.ord == ord {
			return j
		}
	}
	sl := limitSlot{kind: kind, ord: ord}
	if kind == step.KindSlidingLog {
		sl.sl = &slSlot{}
	}
	st.slots = append(st.slots, sl)
	return len(st.slots) - 1
}

// Step runs req for limit i of st.run; see step.Members.
func (st *limitsState) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	sl := &st.slots[st.idx[i]]
	var res floodgate.Result
	var err error
	b := st.run
	switch b.kinds[i] {
	case step.KindTokenBucket:
		sl.p[0], res, err = step.TokenBucket(b.tb[i], sl.s[0], at, req)
	case step.KindLeakyBucket:
		sl.p[0], res, err = step.LeakyBucket(b.ls[i].(floodgate.LeakyBucket), sl.s[0], at, req)
	case step.KindFixedWindow:
		var next step.FixedWindowState
		next, res, err = step.FixedWindow(b.fw[i], step.FixedWindowState{Start: sl.s[0], Count: sl.s[1]}, at, req)
		sl.p[0], sl.p[1] = next.Start, next.Count
	case step.KindCalendarWindow:
		var next step.FixedWindowState
		next, res, err = step.CalendarWindow(b.ls[i].(floodgate.CalendarWindow), step.FixedWindowState{Start: sl.s[0], Count: sl.s[1]}, at, req)
		sl.p[0], sl.p[1] = next.Start, next.Count
	case step.KindSlidingWindow:
		var next step.SlidingWindowState
		next, res, err = step.SlidingWindow(b.ls[i].(floodgate.SlidingWindow), step.SlidingWindowState{Start: sl.s[0], Prev: sl.s[1], Curr: sl.s[2]}, at, req)
		sl.p = [3]int64{next.Start, next.Prev, next.Curr}
	default:
		check := req
		check.Check = true
		res, err = step.SlidingLog(b.ls[i].(floodgate.SlidingLog), &sl.sl.st, at, check)
		sl.sl.at, sl.sl.req = at, req
	}
	if err != nil {
		sl.p = sl.s
	}
	return res, err
}

// Keep stores the state the last Step of limit i left pending.
func (st *limitsState) Keep(i int) {
	sl := &st.slots[st.idx[i]]
	if sl.kind != step.KindSlidingLog {
		sl.s = sl.p
		return
	}
	// The log's Step changed nothing: apply it now.
	_, _ = step.SlidingLog(st.run.ls[i].(floodgate.SlidingLog), &sl.sl.st, sl.sl.at, sl.sl.req)
}

// limitsHeld: the units a key's limits count, until the last of them is
// restored (w is the longest window or restore time bound to the table).
func limitsHeld(st *limitsState, w int64) (held, restoreAt int64) {
	restoreAt = math.MinInt64
	for i := range st.slots {
		sl := &st.slots[i]
		var h, r int64
		switch sl.kind {
		case step.KindTokenBucket, step.KindLeakyBucket:
			r = sl.s[0]
		case step.KindFixedWindow, step.KindCalendarWindow:
			h, r = sl.s[1], sl.s[0]
			if h > 0 {
				r += w
			}
		case step.KindSlidingWindow:
			h, r = swHeld(&step.SlidingWindowState{Start: sl.s[0], Prev: sl.s[1], Curr: sl.s[2]}, w)
		case step.KindSlidingLog:
			h, r = slHeld(&sl.sl.st, w)
		}
		held += h
		restoreAt = max(restoreAt, r)
	}
	return held, restoreAt
}
