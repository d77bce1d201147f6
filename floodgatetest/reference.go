package floodgatetest

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// Reference applies the reference transitions of package step to states
// kept in maps, one per limiter name, key and algorithm kind, as
// floodgate.Store requires: the decisions every store must reproduce. Run checks stores
// against it; a store's own tests use it where they drive the store in ways
// Run cannot (its reclamation, eviction or options). The zero value is a
// Reference in which every key is new. A Reference is not safe for
// concurrent use.
type Reference struct {
	words map[slot]int64 // token bucket and leaky bucket
	fw    map[slot]step.FixedWindowState
	sw    map[slot]step.SlidingWindowState
	sl    map[slot]*step.SlidingLogState
	sub   map[slot]*step.SubWindowState // sliding windows with sub-windows
}

// slot names one state: a step's state belongs to the limiter's name, the
// key and the kind, and for the limits of a floodgate.Limits also to the
// ordinal of the limit among those of its kind (ord is -1 for a single
// algorithm).
type slot struct {
	name string
	key  string
	kind step.Kind
	ord  int
}

// Apply applies req for key with alg bound under name at now, as a store's
// Bound.Apply would, and returns what the store must return; for a
// Limits it writes each limit's Decision to each as Bound.Apply does. alg
// is one of the five configurations as a value, or a Limits of them; the
// state it reads and writes is (name, key, alg's kind), whatever alg's
// configuration (for a Limits, see floodgate.Store). A Request with Check
// changes no state.
func (r *Reference) Apply(name, key string, alg floodgate.Algorithm, now time.Time, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if r.words == nil {
		r.words = map[slot]int64{}
		r.fw = map[slot]step.FixedWindowState{}
		r.sw = map[slot]step.SlidingWindowState{}
		r.sl = map[slot]*step.SlidingLogState{}
		r.sub = map[slot]*step.SubWindowState{}
	}
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	if ls, ok := alg.(floodgate.Limits); ok {
		if err := ls.Validate(); err != nil {
			return floodgate.Result{}, err
		}
		m := &refMembers{r: r, key: key, ls: ls}
		var n [step.KindCalendarWindow + 1]int
		for i, a := range ls {
			k, err := step.KindOf(a)
			if err != nil {
				return floodgate.Result{}, err
			}
			m.slots[i] = slot{name, key, k, n[k]}
			n[k]++
		}
		return step.Limits(ls, m, now, req, each)
	}
	kind, err := step.KindOf(alg)
	if err != nil {
		return floodgate.Result{}, err
	}
	s := slot{name, key, kind, -1}
	if sw, ok := alg.(floodgate.SlidingWindow); ok && sw.SubWindows >= 2 {
		// A state of its own kind, changed in place.
		st := r.sub[s]
		if st == nil {
			st = new(step.SubWindowState)
			r.sub[s] = st
		}
		return step.SubWindow(sw, st, now, req)
	}
	res, next, err := r.step(s, alg, now, req)
	if err == nil && !req.Check {
		r.keep(s, next)
	}
	return res, err
}

// state is one new state a step computed: a word, a window's, or (for the
// sliding log, whose state changes in place) the step to run again.
type state struct {
	word int64
	fw   step.FixedWindowState
	sw   step.SlidingWindowState
	sl   func()
}

// step runs req for alg on the state s and returns the new state without
// storing it.
func (r *Reference) step(s slot, alg floodgate.Algorithm, now time.Time, req floodgate.Request) (floodgate.Result, state, error) {
	var (
		res  floodgate.Result
		next state
		err  error
	)
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		next.word, res, err = step.TokenBucket(a, r.words[s], now, req)
	case floodgate.LeakyBucket:
		next.word, res, err = step.LeakyBucket(a, r.words[s], now, req)
	case floodgate.FixedWindow:
		next.fw, res, err = step.FixedWindow(a, r.fw[s], now, req)
	case floodgate.CalendarWindow:
		next.fw, res, err = step.CalendarWindow(a, r.fw[s], now, req)
	case floodgate.SlidingWindow:
		next.sw, res, err = step.SlidingWindow(a, r.sw[s], now, req)
	case floodgate.SlidingLog:
		if r.sl[s] == nil {
			r.sl[s] = new(step.SlidingLogState)
		}
		check := req
		check.Check = true
		res, err = step.SlidingLog(a, r.sl[s], now, check)
		next.sl = func() { _, _ = step.SlidingLog(a, r.sl[s], now, req) }
	default:
		err = fmt.Errorf("%w: %T", floodgate.ErrInvalidConfig, alg)
	}
	return res, next, err
}

// keep stores the state next of s.
func (r *Reference) keep(s slot, next state) {
	switch s.kind {
	case step.KindTokenBucket, step.KindLeakyBucket:
		r.words[s] = next.word
	case step.KindFixedWindow, step.KindCalendarWindow:
		r.fw[s] = next.fw
	case step.KindSlidingWindow:
		r.sw[s] = next.sw
	case step.KindSlidingLog:
		next.sl()
	}
}

// refMembers is the step.Members of a Limits on a Reference.
type refMembers struct {
	r       *Reference
	key     string
	ls      floodgate.Limits
	slots   [8]slot
	pending [8]state
}

func (m *refMembers) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	res, next, err := m.r.step(m.slots[i], m.ls[i], at, req)
	m.pending[i] = next
	return res, err
}

func (m *refMembers) Keep(i int) { m.r.keep(m.slots[i], m.pending[i]) }

// SameResult reports whether two Results are equal, their instants
// compared with time.Time.Equal: a store may return Result.At in another
// location or without a monotonic reading.
func SameResult(a, b floodgate.Result) bool {
	if !a.At.Equal(b.At) {
		return false
	}
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}
