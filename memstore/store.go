// Package memstore is the in-process floodgate.Store: a sharded table of
// per-key state, one table per algorithm kind.
//
// A step's state belongs to (name, key, kind) as floodgate.Store requires
// (and, for the limits of a Limits, their ordinals): every limiter bound
// to the store shares the table of its algorithm's kind, in which each
// entry's key starts with a prefix of a byte or two that numbers its
// limiter's name, so the keys of limiters with different names never
// meet, a configuration changed under one name continues from what the old
// one counted, and the store's memory grows with the keys, not with the
// number of limiters.
//
// The token bucket, the leaky bucket and the fixed window keep their state in
// one 64-bit word that decisions update with compare-and-swap, so a decision
// on an existing key takes no lock and allocates nothing. The sliding window
// counter (with or without sub-windows) and the sliding log take a per-key
// mutex; with sub-windows a key's S+1 counts live in a slice of their own. So does a fixed window
// key once a configuration other than the one that created it (another
// window, or a limit that needs more bits) touches it, or when its limit is
// too large to pack beside a window index in one word: the word holds the
// window index in units of the creating configuration's window.
//
// # Memory
//
// An entry whose quota is fully restored carries no information: deleting it
// changes no decision. Inserting a key into a shard that has doubled in size
// since it was last swept first reclaims the entries restored for longer
// than ReclaimGrace, so memory stays proportional to the keys in use (those
// called within the time their quota takes to restore plus the grace)
// without a background goroutine; Sweep reclaims every restored entry on
// demand. The grace keeps the entries of keys that are called again soon
// after their quota is restored, the common case at a high rate: such a
// call finds its entry and allocates nothing, where a reclaimed key is
// inserted again, a new entry and a copy of its key (2 allocations; it
// made 100,000 keys refilled between their calls cost 2 allocations and
// 94 B a decision, cd bench && go test -run '^$' -bench
// InProcess100kKeysReclaimed -benchmem). Entries are not reused for other
// keys: lookups take no lock, and a caller still holding a reclaimed entry
// would then step another key's state. Options.MaxKeys caps the entries of each
// algorithm kind: when it is reached, inserting a new key evicts, among a
// few entries of its shard (or of another shard if its own is empty), the
// one that remembers the least: the fewest units counted, then the soonest
// restored (for the buckets, whose state is an instant, the soonest
// restored). The evicted key starts over with a full quota, so a
// key-rotation attack costs bounded memory, and it evicts the keys it
// rotates through (each holding one unit) before any key it spent.
//
// # Clock
//
// By default the store's clock is the wall clock read once at New plus the
// monotonic time elapsed since, so a wall-clock step backwards (NTP, a VM
// resume) neither freezes nor resets any quota. A decision reads it once,
// as time.Since of the instant read at New: one read of the monotonic
// clock, where time.Now reads the wall clock as well. Options.Now injects a
// clock for tests; the algorithms treat a clock that goes backwards
// conservatively (the state stays ahead of it, which admits less, never
// more).
//
// The clock is most of a decision on one key. Measured on a 2-core VM
// (kvm-clock, Go 1.26; medians of 10 runs on a busy host), a token bucket's
// Allow through a Limiter took 72 ns with the default clock, 94 ns with
// Options.Now set to time.Now (both reads), and 28 ns with a frozen clock:
// the one read is about 44 ns, 60% of the decision (on a quieter host, 56
// against 26 ns; time.Since alone measures 32 to 42 ns, time.Now 56 to
// 73 ns). A coarser clock through Options.Now, a time a goroutine stores
// every millisecond and each decision loads (ExampleOptions_cachedClock),
// took 29 ns, 2.5 times faster. Its price: each decision is the exact
// clock's decision at an instant up to one tick earlier, so a bucket
// refills and a window opens up to a tick late, and a window, whose ends
// may lag by different amounts, can be up to a tick shorter in real time.
// The store keeps the exact clock by default. The figures:
//
//	go test ./memstore -run '^$' -bench 'LimiterAllow|Clock' -benchmem -count 10
package memstore

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keytable"
	"github.com/floodgate-go/floodgate/step"
)

// Options configures a Store. A nil *Options means the defaults.
type Options struct {
	// Now is the clock. The default is the wall clock at New plus the
	// monotonic time elapsed since, read once a decision. A coarser clock
	// (a cached time) makes decisions cheaper and later; see the package
	// doc, "# Clock".
	Now func() time.Time
	// MaxKeys caps the number of keys the store tracks per algorithm kind,
	// and the keys of every Limits together (so the store holds at most
	// six times MaxKeys), whatever the number of limiters bound to it. The
	// default is 4,194,304 (about 200 MiB of token buckets). When the cap is reached,
	// new keys evict entries; see the package doc.
	MaxKeys int
	// Shards is the number of lock shards per algorithm, rounded up to a
	// power of two. The default is 64 per CPU, at most 4096.
	Shards int
}

// ReclaimGrace is how long an entry stays after its quota is fully
// restored before the sweeps of insertions may reclaim it (Sweep does not
// wait): a key called again within it allocates nothing. See the package
// doc, "# Memory".
const ReclaimGrace = time.Second

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

	// One table per algorithm kind, created on first use and shared by
	// every configuration of the kind: a key's state belongs to (key,
	// kind), as floodgate.Store requires.
	mu     sync.Mutex                // serializes the creation of tables and of scopes
	scopes map[string]keytable.Scope // by name, guarded by mu
	tb, lb atomic.Pointer[wordTable]
	fw     atomic.Pointer[fwTable]
	cw     atomic.Pointer[fwTable] // calendar windows
	sw, sl atomic.Pointer[lockedTable]
	sub    atomic.Pointer[lockedTable] // sliding windows with sub-windows
	lim    atomic.Pointer[lockedTable] // every Limits
}

var _ floodgate.Store = (*Store)(nil)

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

// Bind returns the steps of alg on this store under name; see
// floodgate.Store. floodgate.New calls it. Binding allocates no table:
// every configuration of a kind shares the kind's table, where the keys of
// each name are kept apart by the name's prefix (see the package doc), so
// the store's memory is bounded by MaxKeys per kind whatever the number of
// limiters.
func (s *Store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	sc := s.scope(name)
	if ls, ok := alg.(floodgate.Limits); ok {
		if err := ls.Validate(); err != nil {
			return nil, err
		}
		return s.bindLimits(sc, ls)
	}
	if err := check(alg); err != nil {
		return nil, err
	}
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		b := s.bindTB(sc, a)
		return &b, nil
	case floodgate.LeakyBucket:
		b := s.bindLB(sc, a)
		return &b, nil
	case floodgate.FixedWindow:
		b := s.bindFW(sc, a)
		return &b, nil
	case floodgate.CalendarWindow:
		return s.bindCW(sc, a), nil
	case floodgate.SlidingWindow:
		if a.SubWindows >= 2 {
			return s.bindSub(sc, a), nil
		}
		b := s.bindSW(sc, a)
		return &b, nil
	default:
		b := s.bindSL(sc, alg.(floodgate.SlidingLog))
		return &b, nil
	}
}

// keytable.Scope returns the keytable.Scope of name's keys, numbering a name the first time
// it is bound. The numbers are never reused: the store remembers every
// name bound to it (the name and a few words each).
func (s *Store) scope(name string) keytable.Scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc, ok := s.scopes[name]; ok {
		return sc
	}
	if s.scopes == nil {
		s.scopes = map[string]keytable.Scope{}
	}
	sc := keytable.NewScope(uint64(len(s.scopes)) + 1)
	s.scopes[name] = sc
	return sc
}

// check validates alg, one of the five configurations as a value.
func check(alg floodgate.Algorithm) error {
	if _, err := step.KindOf(alg); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	return alg.Validate()
}

// lazy returns the table in p, creating it with newT on first use.
func lazy[T any](s *Store, p *atomic.Pointer[T], newT func() *T) *T {
	if t := p.Load(); t != nil {
		return t
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := p.Load(); t != nil {
		return t
	}
	t := newT()
	p.Store(t)
	return t
}

func (s *Store) bindTB(sc keytable.Scope, a floodgate.TokenBucket) tbBound {
	// Rate 1 per emission interval is the same bucket, and spares the step
	// a division.
	tau := a.Policy().Window
	a.Per, a.Rate = tau/time.Duration(a.Burst), 1
	return tbBound{t: lazy(s, &s.tb, func() *wordTable { return newWordTable(s) }), sc: sc, a: a, tau: int64(tau)}
}

func (s *Store) bindLB(sc keytable.Scope, a floodgate.LeakyBucket) lbBound {
	a.Per, a.Rate = a.Policy().Window/time.Duration(a.Capacity), 1
	return lbBound{t: lazy(s, &s.lb, func() *wordTable { return newWordTable(s) }), sc: sc, a: a}
}

func (s *Store) bindFW(sc keytable.Scope, a floodgate.FixedWindow) fwBound {
	t := lazy(s, &s.fw, func() *fwTable { return newFWTable(s) })
	raise(&t.maxW, int64(a.Window))
	return fwBound{t: t, sc: sc, a: a, pack: newFWPacking(a, s.nowNs())}
}

func (s *Store) bindSW(sc keytable.Scope, a floodgate.SlidingWindow) swBound {
	t := lazy(s, &s.sw, func() *lockedTable {
		return newLockedTable(s, func() *keytable.Entry { return &new(swEntry).Entry },
			func(e *lockedEntry, w int64) (int64, int64) { return swHeld(e.sw(), w) })
	})
	raise(&t.maxW, int64(a.Window))
	return swBound{t: t, sc: sc, a: a}
}

// bindSub binds a sliding window with sub-windows, whose states keep their
// own sub-window length (held needs no window).
func (s *Store) bindSub(sc keytable.Scope, a floodgate.SlidingWindow) *subBound {
	t := lazy(s, &s.sub, func() *lockedTable {
		return newLockedTable(s, func() *keytable.Entry { return &new(subEntry).Entry },
			func(e *lockedEntry, _ int64) (int64, int64) { return subHeld(e.sub()) })
	})
	return &subBound{t: t, sc: sc, a: a}
}

func (s *Store) bindSL(sc keytable.Scope, a floodgate.SlidingLog) slBound {
	t := lazy(s, &s.sl, func() *lockedTable {
		return newLockedTable(s, func() *keytable.Entry { return &new(slEntry).Entry },
			func(e *lockedEntry, w int64) (int64, int64) { return slHeld(e.sl(), w) })
	})
	raise(&t.maxW, int64(a.Window))
	return slBound{t: t, sc: sc, a: a}
}

// raise sets m to v if v is larger.
func raise(m *atomic.Int64, v int64) {
	for old := m.Load(); v > old && !m.CompareAndSwap(old, v); old = m.Load() {
	}
}

// sweeper is what Len and Sweep need of a table.
type sweeper interface {
	sweep(now int64)
	len() int
}

// tables returns the tables created so far.
func (s *Store) tables() []sweeper {
	var ts []sweeper
	if t := s.tb.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.lb.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.fw.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.cw.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.sw.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.sl.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.sub.Load(); t != nil {
		ts = append(ts, t)
	}
	if t := s.lim.Load(); t != nil {
		ts = append(ts, t)
	}
	return ts
}

// Len returns the number of keys the store tracks, over all algorithms.
func (s *Store) Len() int {
	n := 0
	for _, t := range s.tables() {
		n += t.len()
	}
	return n
}

// Sweep reclaims every entry whose quota is fully restored. Stores reclaim
// such entries as they grow, once restored for ReclaimGrace; Sweep is for
// callers that want memory back sooner, for example after a burst of
// one-off keys.
func (s *Store) Sweep() {
	now := s.nowNs()
	for _, t := range s.tables() {
		t.sweep(now)
	}
}

// stepNow is nowNs for a step, with whether the instant is one a step
// accepts (floodgate.CheckTime).
func (s *Store) stepNow() (int64, bool) {
	if s.now == nil {
		ns := s.baseNs + int64(time.Since(s.base))
		return ns, ns >= 0
	}
	now := s.now()
	return now.UnixNano(), floodgate.CheckTime(now) == nil
}

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
