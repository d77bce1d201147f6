package memstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// limitsState is the state of a key's Limits: one slot per limit kind and
// ordinal (the i-th limit of a kind in a Limits), shared by every Limits
// bound to the store. It is the step.Members of the bound that holds the
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
	t     *lockedTable[limitsState]
	ls    floodgate.Limits
	kinds [8]step.Kind
	ords  [8]uint8
}

func (s *Store) bindLimits(ls floodgate.Limits) (*limitsBound, error) {
	t := lazy(s, &s.lim, func() *lockedTable[limitsState] { return newLockedTable(s, limitsHeld) })
	b := &limitsBound{t: t, ls: ls}
	var next [step.KindSlidingLog + 1]uint8
	for i, a := range ls {
		k, err := step.KindOf(a)
		if err != nil {
			return nil, fmt.Errorf("memstore: Limits[%d]: %w", i, err)
		}
		b.kinds[i], b.ords[i] = k, next[k]
		next[k]++
		raise(&t.maxW, int64(a.Policy().Window))
	}
	return b, nil
}

// Apply executes one step of the Limits on key; see floodgate.Bound. The
// limits decide under the key's one lock.
func (b *limitsBound) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	return b.t.apply(key, func(st *limitsState, now time.Time) (floodgate.Result, error) {
		st.bind(b)
		res, err := step.Limits(b.ls, st, now, req)
		st.run = nil
		return res, err
	})
}

// Take is Apply of a plain take.
func (b *limitsBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
	return res.Decision, err
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
	switch a := st.run.ls[i].(type) {
	case floodgate.TokenBucket:
		sl.p[0], res, err = step.TokenBucket(a, sl.s[0], at, req)
	case floodgate.LeakyBucket:
		sl.p[0], res, err = step.LeakyBucket(a, sl.s[0], at, req)
	case floodgate.FixedWindow:
		var next step.FixedWindowState
		next, res, err = step.FixedWindow(a, step.FixedWindowState{Start: sl.s[0], Count: sl.s[1]}, at, req)
		sl.p[0], sl.p[1] = next.Start, next.Count
	case floodgate.SlidingWindow:
		var next step.SlidingWindowState
		next, res, err = step.SlidingWindow(a, step.SlidingWindowState{Start: sl.s[0], Prev: sl.s[1], Curr: sl.s[2]}, at, req)
		sl.p = [3]int64{next.Start, next.Prev, next.Curr}
	case floodgate.SlidingLog:
		check := req
		check.Check = true
		res, err = step.SlidingLog(a, &sl.sl.st, at, check)
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
		case step.KindFixedWindow:
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
