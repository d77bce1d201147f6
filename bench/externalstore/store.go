// Package externalstore is a floodgate.Store written outside floodgate's
// module, with its public API only (package floodgate's Store protocol and
// package step's transitions), and tested with floodgatetest.Run as any
// third-party store would be. It keeps every state in one map under one
// mutex and never forgets a key: a demonstration, not a store to deploy.
package externalstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// ErrClosed reports a decision on a closed Store.
var ErrClosed = errors.New("externalstore: store closed")

// Store keeps the state of each (key, kind) in a map. It is safe for
// concurrent use; the zero value is not usable: use New.
type Store struct {
	now    func() time.Time
	mu     sync.Mutex // guards states and closed, and orders the clock's readings
	states map[slot]any
	closed bool
}

// slot names a state: a key's state belongs to the key and the algorithm's
// kind, as floodgate.Store requires.
type slot struct {
	key  string
	kind step.Kind
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store on the clock now; nil means time.Now.
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, states: map[slot]any{}}
}

// Bind returns the Bound of alg, one of the five configurations.
func (s *Store) Bind(alg floodgate.Algorithm) (floodgate.Bound, error) {
	kind, err := step.KindOf(alg)
	if err != nil {
		return nil, err
	}
	if err := alg.Validate(); err != nil {
		return nil, err
	}
	return &bound{s: s, alg: alg, kind: kind}, nil
}

// Close makes every later decision fail with ErrClosed. It is safe to call
// more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.states = nil
	return nil
}

type bound struct {
	s    *Store
	alg  floodgate.Algorithm
	kind step.Kind
}

// Apply applies the transition of the bound algorithm to the key's state
// under the store's lock, at the clock read under it: the steps on a key
// see time in the order they run.
func (b *bound) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if err := step.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Result{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return floodgate.Result{}, fmt.Errorf("%w: %w", floodgate.ErrUnavailable, ErrClosed)
	}
	now, at := s.now(), slot{key, b.kind}
	var (
		res floodgate.Result
		err error
	)
	switch a := b.alg.(type) {
	case floodgate.TokenBucket:
		tat, _ := s.states[at].(int64)
		tat, res, err = step.TokenBucket(a, tat, now, req)
		s.states[at] = tat
	case floodgate.LeakyBucket:
		tail, _ := s.states[at].(int64)
		tail, res, err = step.LeakyBucket(a, tail, now, req)
		s.states[at] = tail
	case floodgate.FixedWindow:
		st, _ := s.states[at].(step.FixedWindowState)
		st, res, err = step.FixedWindow(a, st, now, req)
		s.states[at] = st
	case floodgate.SlidingWindow:
		st, _ := s.states[at].(step.SlidingWindowState)
		st, res, err = step.SlidingWindow(a, st, now, req)
		s.states[at] = st
	case floodgate.SlidingLog:
		st, _ := s.states[at].(*step.SlidingLogState)
		if st == nil {
			st = new(step.SlidingLogState)
			s.states[at] = st
		}
		res, err = step.SlidingLog(a, st, now, req)
	}
	return res, err
}

// Take is Apply of a take of n units, reporting the Decision.
func (b *bound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
	return res.Decision, err
}
