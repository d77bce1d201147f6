package lease

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// Store is a floodgate.Store that serves the decisions of the limiters
// bound to it from per-key pools of units leased in batches from a remote
// Store, typically a redisstore; see the package doc for what it
// guarantees. It is safe for concurrent use. Create one with New and
// Close it when done: it owns goroutines and holds units of the remote's
// quotas. The zero value is not usable.
type Store struct {
	remote floodgate.Store
	cfg    config // Options resolved for every quota: the clock, the timeouts
	jan    *janitor

	mu        sync.RWMutex // guards closed against wg.Add, and bindings
	closed    atomic.Bool  // set under mu; read without it
	wg        sync.WaitGroup
	closeDone chan struct{} // closed when the first Close returns
	// bindings holds one binding per name and algorithm bound: limiters
	// of one name and algorithm share their pools, as they share their
	// state at the remote. wg counts the janitor and the refills in
	// flight.
	bindings map[bindKey]*binding

	// Totals for Stats. local holds the hits of pools once moved out of
	// them (at each refill and when a pool is retired).
	local       atomic.Int64
	waited      atomic.Int64
	forwarded   atomic.Int64
	leases      atomic.Int64
	leased      atomic.Int64
	returned    atomic.Int64
	shares      atomic.Int64
	shareErrors atomic.Int64
}

// bindKey identifies a binding. alg is one of the four configurations
// Bind accepts, all comparable.
type bindKey struct {
	name string
	alg  floodgate.Algorithm
}

var _ floodgate.Store = (*Store)(nil)

// errClosed is the error of a step on a closed Store.
var errClosed = fmt.Errorf("lease: %w: %w", floodgate.ErrUnavailable, floodgate.ErrClosed)

// New returns a Store that leases units from remote, configured by opts
// (nil means the defaults). It starts a goroutine that Close stops.
//
// The pools lease units with the remote's Apply (OpTakeUpTo) and give
// unused ones back with it (OpSettle). New returns an error matching
// floodgate.ErrInvalidConfig when remote is nil, and one matching
// ErrInvalidOptions for unusable Options (for an invalid
// Options.Observer, floodgate.ErrInvalidConfig too). MinBatch is checked
// against each limiter's quota when it binds.
func New(remote floodgate.Store, opts *Options) (*Store, error) {
	if remote == nil {
		return nil, fmt.Errorf("%w: lease: nil remote store", floodgate.ErrInvalidConfig)
	}
	cfg, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	s := &Store{remote: remote, cfg: cfg, jan: newJanitor(), closeDone: make(chan struct{}),
		bindings: map[bindKey]*binding{}}
	s.wg.Add(1)
	go s.runJanitor()
	return s, nil
}

// Bind binds alg under name on the remote store and returns what serves
// its decisions from pools; see floodgate.Store. Binding one name and
// algorithm again returns the same Bound: its limiters share their pools.
//
// Bind returns an error matching floodgate.ErrInvalidConfig for a leaky
// bucket, whose shaping leases would defeat (a pool admits its units at
// once), and for a floodgate.Limits, whose limits would expire leased
// units at different instants (a pool's expiry follows one algorithm:
// units leased from a fixed or sliding window expire when the window that
// counted them ends, and a composite's limits end theirs at different
// instants, or never): bind those to the remote directly. It returns an
// error matching both ErrInvalidOptions and floodgate.ErrInvalidConfig
// when Options.MinBatch is above alg's quota, the remote's errors, and
// after Close one matching floodgate.ErrUnavailable and
// floodgate.ErrClosed.
func (s *Store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	switch alg.(type) {
	case floodgate.Limits, *floodgate.Limits:
		return nil, fmt.Errorf("%w: lease: %v is a Limits, whose limits would expire leased units at different instants; bind it to the remote store", floodgate.ErrInvalidConfig, alg)
	}
	kind, err := step.KindOf(alg)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if kind == step.KindLeakyBucket {
		return nil, fmt.Errorf("%w: lease: %v is a leaky bucket, whose shaping leases would defeat (a pool admits its units at once); bind it to the remote store", floodgate.ErrInvalidConfig, alg)
	}
	if err := alg.Validate(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if hasCalendar(alg) {
		return nil, fmt.Errorf("%w: lease: %v has a CalendarWindow, whose civil windows the pools do not follow yet; bind it to the remote store", floodgate.ErrInvalidConfig, alg)
	}
	policy := alg.Policy()
	cfg, err := s.cfg.forQuota(policy.Quota)
	if err != nil {
		return nil, err
	}
	k := bindKey{name: name, alg: alg}
	s.mu.RLock()
	b, closed := s.bindings[k], s.closed.Load()
	s.mu.RUnlock()
	switch {
	case closed:
		return nil, errClosed
	case b != nil:
		return b, nil
	}
	remote, err := s.remote.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	if remote == nil {
		return nil, fmt.Errorf("%w: lease: %T bound %v to nothing", floodgate.ErrInvalidConfig, s.remote, alg)
	}
	b = &binding{s: s, remote: remote, name: name, kind: kind, policy: policy, cfg: cfg,
		entries: xsync.NewMap[string, *entry]()}
	switch kind {
	case step.KindFixedWindow, step.KindSlidingWindow:
		b.window = int64(policy.Window)
	case step.KindSubWindows:
		// The remote counts a unit in the sub-window it was leased in, for
		// as long as it would count a unit admitted at any instant of it:
		// a unit used within that sub-window is counted exactly as an
		// admission then.
		b.window = int64(policy.Window) / int64(alg.(floodgate.SlidingWindow).SubWindows)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, errClosed
	}
	if prev := s.bindings[k]; prev != nil {
		// A concurrent Bind of the same name and algorithm won.
		return prev, nil
	}
	s.bindings[k] = b
	return b, nil
}

// open returns nil for an open Store, and the error of a step on a closed
// one.
func (s *Store) open() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// enter registers a goroutine with wg unless the Store is closed.
func (s *Store) enter() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false
	}
	s.wg.Add(1)
	return true
}

// Stats returns the Store's cumulative counts, over every limiter bound to
// it. It visits every key, and counts a decision that races with a pool's
// retirement at most once but possibly not at all.
func (s *Store) Stats() Stats {
	st := Stats{
		Waited:      s.waited.Load(),
		Forwarded:   s.forwarded.Load(),
		Leases:      s.leases.Load(),
		Leased:      s.leased.Load(),
		Returned:    s.returned.Load(),
		Shares:      s.shares.Load(),
		ShareErrors: s.shareErrors.Load(),
	}
	local := s.local.Load()
	for _, b := range s.bound() {
		for _, e := range b.entries.AllRelaxed() {
			if p := e.pool.Load(); p != nil {
				local += p.hits.Load()
			}
		}
	}
	st.Local = local
	return st
}

// Close gives the units held in pools back to the remote, where its
// algorithm allows (see the package doc), and stops the Store's
// goroutines after the refills in flight end, whose units it gives back
// too. Steps after Close fail with an error matching
// floodgate.ErrUnavailable and floodgate.ErrClosed. Close returns the
// refunds' errors; the units of a failed refund stay consumed at the
// remote. It does not close the remote store. It is safe to call more
// than once: later calls wait for the first and return nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		<-s.closeDone
		return nil
	}
	s.closed.Store(true)
	s.mu.Unlock()
	bindings := s.bound() // no Bind adds one from here on
	defer close(s.closeDone)
	close(s.jan.stop)
	s.wg.Wait() // no refill runs or starts after this
	now := s.cfg.now()
	var jobs []returnJob
	for _, b := range bindings {
		for _, e := range b.entries.All() {
			e.mu.Lock()
			e.dead = true
			if p := e.pool.Load(); p != nil {
				e.pool.Store(nil)
				jobs = append(jobs, b.retireLocked(e, p, returnClosed, now)...)
			}
			e.mu.Unlock()
		}
		b.entries.Clear()
	}
	return s.giveBack(jobs)
}

// bound returns the Store's bindings.
func (s *Store) bound() []*binding {
	s.mu.RLock()
	defer s.mu.RUnlock()
	bs := make([]*binding, 0, len(s.bindings))
	for _, b := range s.bindings {
		bs = append(bs, b)
	}
	return bs
}

// ErrInvalidOptions reports unusable Options.
var ErrInvalidOptions = errors.New("lease: invalid options")

// hasCalendar reports whether alg is, or holds, a CalendarWindow.
func hasCalendar(alg floodgate.Algorithm) bool {
	if ls, ok := alg.(floodgate.Limits); ok {
		for _, l := range ls {
			if hasCalendar(l) {
				return true
			}
		}
		return false
	}
	_, ok := alg.(floodgate.CalendarWindow)
	return ok
}
