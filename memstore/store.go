// Package memstore is the in-process floodgate.Store: a sharded table of
// per-key state, one table per algorithm configuration.
//
// The token bucket, the leaky bucket and the fixed window keep their state in
// one 64-bit word that decisions update with compare-and-swap, so a decision
// on an existing key takes no lock beyond a shard's read lock for the lookup
// and allocates nothing. The sliding window counter and the sliding log take
// a per-key mutex (a fixed window whose limit is too large to pack beside its
// window index in one word does too).
//
// # Memory
//
// An entry whose quota is fully restored carries no information: deleting it
// changes no decision. Inserting a key into a shard that has doubled in size
// since it was last swept first reclaims such entries, so memory stays
// proportional to the keys in use without a background goroutine; Sweep
// reclaims them on demand. Options.MaxKeys caps the entries of each
// algorithm configuration: when it is reached, inserting a new key evicts,
// among a few entries of its shard (or of another shard if its own is
// empty), the one closest to full restoration.
// The evicted key starts over with a full quota, so a key-rotation attack
// costs bounded memory at the price of forgiving what the evicted entries
// still remembered.
//
// # Clock
//
// By default the store's clock is the wall clock read once at New plus the
// monotonic time elapsed since, so a wall-clock step backwards (NTP, a VM
// resume) neither freezes nor resets any quota. Options.Now injects a clock
// for tests; the algorithms treat a clock that goes backwards conservatively
// (the state stays ahead of it, which admits less, never more).
package memstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Options configures a Store. A nil *Options means the defaults.
type Options struct {
	// Now is the clock. The default is the wall clock at New plus the
	// monotonic time elapsed since.
	Now func() time.Time
	// MaxKeys caps the number of keys the store tracks per algorithm
	// configuration. The default is 4,194,304 (about 200 MiB of token
	// buckets). When the cap is reached, new keys evict entries; see the
	// package doc.
	MaxKeys int
	// Shards is the number of lock shards per algorithm, rounded up to a
	// power of two. The default is 64 per CPU, at most 4096.
	Shards int
}

// DefaultMaxKeys is the default of Options.MaxKeys.
const DefaultMaxKeys = 1 << 22

// ErrInvalidOptions reports unusable Options.
var ErrInvalidOptions = errors.New("memstore: invalid options")

// Store is the in-process floodgate.Store. It is safe for concurrent use.
// Create one with New; the zero value is not usable.
type Store struct {
	now     func() time.Time // the injected clock, or nil
	base    time.Time        // with baseNs, the default clock
	baseNs  int64
	maxKeys int64
	shards  int

	mu     sync.Mutex                // serializes additions to bounds
	bounds atomic.Pointer[[]binding] // copy-on-write: one table per algorithm
}

var _ floodgate.Binder = (*Store)(nil)

// binding is the table of one algorithm configuration.
type binding struct {
	alg floodgate.Algorithm
	t   boundTable
}

// boundTable applies steps of one algorithm configuration.
type boundTable interface {
	floodgate.Bound
	// sweep reclaims the entries restored at now.
	sweep(now int64)
	len() int
}

// New returns a Store. A nil opts means the defaults.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxKeys < 0 {
		return nil, fmt.Errorf("%w: MaxKeys must not be negative, got %d", ErrInvalidOptions, o.MaxKeys)
	}
	if o.Shards < 0 {
		return nil, fmt.Errorf("%w: Shards must not be negative, got %d", ErrInvalidOptions, o.Shards)
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Shards == 0 {
		o.Shards = min(64*runtime.GOMAXPROCS(0), 4096)
	}
	// Fewer shards than keys per shard keeps eviction within a shard
	// meaningful for small caps.
	o.Shards = min(o.Shards, max(o.MaxKeys/16, 1), 1<<16)
	s := &Store{now: o.Now, maxKeys: int64(o.MaxKeys), shards: 1 << bits.Len(uint(o.Shards-1))}
	s.base = time.Now()
	s.baseNs = s.base.UnixNano()
	s.bounds.Store(&[]binding{})
	return s, nil
}

// clock returns the store's time: the injected clock, or the wall clock at
// New plus the monotonic time since. time.Since reads only the monotonic
// clock, and time.Unix from nanoseconds avoids time.Time.Add's monotonic
// bookkeeping: together they cost less than one time.Now.
func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Unix(0, s.baseNs+int64(time.Since(s.base)))
}

// Apply executes one step; see floodgate.Store. It never blocks on I/O and
// ignores ctx.
func (s *Store) Apply(ctx context.Context, key string, alg floodgate.Algorithm, req floodgate.Request) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	t, err := s.table(alg)
	if err != nil {
		return floodgate.Result{}, err
	}
	return t.Apply(ctx, key, req)
}

// Bind returns the steps of alg on this store; see floodgate.Binder.
// floodgate.New calls it, so that a Limiter's decisions skip finding alg's
// table.
func (s *Store) Bind(alg floodgate.Algorithm) (floodgate.Bound, error) {
	return s.table(alg)
}

// table returns the table of alg, creating it on first use.
func (s *Store) table(alg floodgate.Algorithm) (boundTable, error) {
	switch alg.(type) {
	case floodgate.TokenBucket, floodgate.LeakyBucket, floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingLog:
	default:
		// Only the five comparable config types reach the == below.
		return nil, fmt.Errorf("%w: memstore does not support %T", floodgate.ErrInvalidConfig, alg)
	}
	for _, b := range *s.bounds.Load() {
		if b.alg == alg {
			return b.t, nil
		}
	}
	if err := alg.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.bounds.Load()
	for _, b := range old {
		if b.alg == alg {
			return b.t, nil
		}
	}
	t := s.newTable(alg)
	bs := append(append(make([]binding, 0, len(old)+1), old...), binding{alg: alg, t: t})
	s.bounds.Store(&bs)
	return t, nil
}

func (s *Store) newTable(alg floodgate.Algorithm) boundTable {
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		// Rate 1 per emission interval is the same bucket, and spares the
		// step a division.
		a.Per, a.Rate = a.Policy().Window/time.Duration(a.Burst), 1
		return newWordTable(s, wordTB, a, floodgate.LeakyBucket{}, fwPacking{})
	case floodgate.LeakyBucket:
		a.Per, a.Rate = a.Policy().Window/time.Duration(a.Capacity), 1
		return newWordTable(s, wordLB, floodgate.TokenBucket{}, a, fwPacking{})
	case floodgate.FixedWindow:
		if p, ok := newFWPacking(a, s.nowNs()); ok {
			return newWordTable(s, wordFW, floodgate.TokenBucket{}, floodgate.LeakyBucket{}, p)
		}
		return newLockedTable(s,
			func(st *floodgate.FixedWindowState, now time.Time, req floodgate.Request) (floodgate.Result, error) {
				next, res, err := a.Step(*st, now, req)
				*st = next
				return res, err
			},
			func(st *floodgate.FixedWindowState) int64 { return fwRestoreAt(*st, int64(a.Window)) })
	case floodgate.SlidingWindow:
		w := int64(a.Window)
		return newLockedTable(s,
			func(st *floodgate.SlidingWindowState, now time.Time, req floodgate.Request) (floodgate.Result, error) {
				next, res, err := a.Step(*st, now, req)
				*st = next
				return res, err
			},
			func(st *floodgate.SlidingWindowState) int64 {
				switch {
				case st.Curr > 0:
					return st.Start + 2*w
				case st.Prev > 0:
					return st.Start + w
				}
				// An empty window reserved ahead keeps the windows before it
				// closed: forgetting it early would reopen them.
				return st.Start
			})
	case floodgate.SlidingLog:
		w := int64(a.Window)
		return newLockedTable(s,
			func(st *floodgate.SlidingLogState, now time.Time, req floodgate.Request) (floodgate.Result, error) {
				return a.Step(st, now, req)
			},
			func(st *floodgate.SlidingLogState) int64 {
				if last, ok := st.Last(); ok {
					return last + w
				}
				return math.MinInt64
			})
	}
	panic("memstore: unreachable: table checks the algorithm type")
}

// Len returns the number of keys the store tracks, over all algorithms.
func (s *Store) Len() int {
	n := 0
	for _, b := range *s.bounds.Load() {
		n += b.t.len()
	}
	return n
}

// Sweep reclaims every entry whose quota is fully restored. Stores reclaim
// such entries as they grow; Sweep is for callers that want memory back
// sooner, for example after a burst of one-off keys.
func (s *Store) Sweep() {
	now := s.nowNs()
	for _, b := range *s.bounds.Load() {
		b.t.sweep(now)
	}
}

// fwRestoreAt returns the instant a fixed window state carries no
// information: the end of its window or, for an empty one, its start (an
// empty window reserved ahead keeps the windows before it closed).
func fwRestoreAt(st floodgate.FixedWindowState, w int64) int64 {
	if st.Count == 0 {
		return st.Start
	}
	return st.Start + w
}

// stepNow is nowNs for a step, with whether the instant is one a step
// accepts: from 1970 until the nanoseconds overflow in 2262, as
// floodgate.TokenBucket.Step checks.
func (s *Store) stepNow() (int64, bool) {
	if s.now == nil {
		ns := s.baseNs + int64(time.Since(s.base))
		return ns, ns >= 0
	}
	now := s.now()
	return now.UnixNano(), uint64(now.Unix()) <= latestUnix
}

// latestUnix is the last second whose nanoseconds fit an int64.
const latestUnix = (1<<63 - 1) / 1_000_000_000

// nowNs returns the store's clock in nanoseconds since the Unix epoch for
// reclamation, or math.MinInt64, before which nothing is restored, when the
// clock is outside the range steps accept: there its nanoseconds would
// overflow and could reclaim entries that still count.
func (s *Store) nowNs() int64 {
	ns, ok := s.stepNow()
	if !ok {
		return math.MinInt64
	}
	return ns
}
