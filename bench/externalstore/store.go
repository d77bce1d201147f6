// Package externalstore is a floodgate.Store written outside floodgate's
// module, with its public API only (package floodgate's Store protocol and
// argument checks, package step's transitions), and tested with
// floodgatetest.Run as any third-party store would be. It keeps every
// state in one map under one mutex and never forgets a key: a
// demonstration, not a store to deploy.
package externalstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// Store keeps the state of each (name, key, kind, ordinal) in a map. It is
// safe for concurrent use; the zero value is not usable: use New.
type Store struct {
	now    func() time.Time
	mu     sync.Mutex // guards states and closed, and orders the clock's readings
	states map[slot]any
	closed bool
}

// slot names a state: a step's state belongs to the limiter's name, the
// key, the algorithm's kind and, for the limits of a Limits, the limit's
// ordinal among those of its kind (-1 for a single algorithm), as
// floodgate.Store requires.
type slot struct {
	name string
	key  string
	kind step.Kind
	ord  int
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store on the clock now; nil means time.Now.
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, states: map[slot]any{}}
}

// Bind returns the Bound of alg, one of the configurations (a
// CalendarWindow and a SlidingWindow with SubWindows included) or a Limits
// of them, under name.
func (s *Store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	if err := alg.Validate(); err != nil {
		return nil, err
	}
	b := &bound{s: s, name: name, alg: alg, quota: alg.Policy().Quota}
	ls, composite := alg.(floodgate.Limits)
	if !composite {
		ls = floodgate.Limits{alg}
	}
	var ords [step.KindCalendarWindow + 1]int
	for _, a := range ls {
		kind, err := step.KindOf(a)
		if err != nil {
			return nil, err
		}
		ord := -1
		if composite {
			ord = ords[kind]
			ords[kind]++
		}
		b.limits = append(b.limits, limit{alg: a, kind: kind, ord: ord})
	}
	return b, nil
}

// Close makes every later decision fail with an error matching
// floodgate.ErrUnavailable and floodgate.ErrClosed. It is safe to call
// more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.states = nil
	return nil
}

type bound struct {
	s      *Store
	name   string
	alg    floodgate.Algorithm
	quota  int64
	limits []limit // the algorithm's, or the Limits'
}

// limit is one limit of a binding, with the ordinal of its state.
type limit struct {
	alg  floodgate.Algorithm
	kind step.Kind
	ord  int
}

// Apply applies the transition of the bound algorithm to the key's state
// under the store's lock, at the clock read under it: the steps on a key
// see time in the order they run.
func (b *bound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	if err := floodgate.CheckRequest(req, b.quota); err != nil {
		return floodgate.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Result{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return floodgate.Result{}, fmt.Errorf("externalstore: %w: %w", floodgate.ErrUnavailable, floodgate.ErrClosed)
	}
	m := members{b: b, key: key}
	now := s.now()
	if ls, ok := b.alg.(floodgate.Limits); ok {
		return step.Limits(ls, &m, now, req, each)
	}
	res, err := m.Step(0, now, req)
	if err == nil && !req.Check {
		m.Keep(0)
	}
	return res, err
}

// Take is Apply of a take of n units, reporting the Decision.
func (b *bound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// members runs the limits' transitions on the store's states, as
// step.Members: a step's new state is pending until Keep. The caller
// holds the store's lock.
type members struct {
	b       *bound
	key     string
	pending [8]func()
}

func (m *members) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	l := m.b.limits[i]
	states := m.b.s.states
	sl := slot{m.b.name, m.key, l.kind, l.ord}
	var (
		res floodgate.Result
		err error
	)
	switch a := l.alg.(type) {
	case floodgate.TokenBucket:
		tat, _ := states[sl].(int64)
		tat, res, err = step.TokenBucket(a, tat, at, req)
		m.pending[i] = func() { states[sl] = tat }
	case floodgate.LeakyBucket:
		tail, _ := states[sl].(int64)
		tail, res, err = step.LeakyBucket(a, tail, at, req)
		m.pending[i] = func() { states[sl] = tail }
	case floodgate.FixedWindow:
		st, _ := states[sl].(step.FixedWindowState)
		st, res, err = step.FixedWindow(a, st, at, req)
		m.pending[i] = func() { states[sl] = st }
	case floodgate.CalendarWindow:
		st, _ := states[sl].(step.FixedWindowState)
		st, res, err = step.CalendarWindow(a, st, at, req)
		m.pending[i] = func() { states[sl] = st }
	case floodgate.SlidingWindow:
		if a.SubWindows >= 2 {
			// The sub-windows change in place, as the log does.
			res, err = inPlace(states, sl, &m.pending[i], req, func(st *step.SubWindowState, r floodgate.Request) (floodgate.Result, error) {
				return step.SubWindow(a, st, at, r)
			})
			break
		}
		st, _ := states[sl].(step.SlidingWindowState)
		st, res, err = step.SlidingWindow(a, st, at, req)
		m.pending[i] = func() { states[sl] = st }
	case floodgate.SlidingLog:
		res, err = inPlace(states, sl, &m.pending[i], req, func(st *step.SlidingLogState, r floodgate.Request) (floodgate.Result, error) {
			return step.SlidingLog(a, st, at, r)
		})
	default:
		err = fmt.Errorf("%w: externalstore: %v", floodgate.ErrInvalidConfig, l.alg)
		m.pending[i] = func() {}
	}
	return res, err
}

func (m *members) Keep(i int) { m.pending[i]() }

// inPlace runs decide on the state of sl, a state that changes in place
// (a log, sub-windows; made on first use): as a check now, and for real
// in *pending, which Keep runs.
func inPlace[S any](states map[slot]any, sl slot, pending *func(), req floodgate.Request, decide func(*S, floodgate.Request) (floodgate.Result, error)) (floodgate.Result, error) {
	st, _ := states[sl].(*S)
	if st == nil {
		st = new(S)
		states[sl] = st
	}
	check := req
	check.Check = true
	*pending = func() { _, _ = decide(st, req) }
	return decide(st, check)
}
