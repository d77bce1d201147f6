package memstore

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keytable"
	"github.com/floodgate-go/floodgate/internal/take"
	"github.com/floodgate-go/floodgate/step"
)

// dead marks a word entry that a sweep removed from its table. A step that
// loads it looks the key up again. No algorithm stores this value: times
// are far from math.MinInt64 and packed fixed windows stay above it.
const dead = math.MinInt64

// wordEntry is the state of a token bucket or leaky bucket key: one word,
// an absolute instant (the theoretical arrival time, the next departure),
// which means the same to every configuration of the kind.
type wordEntry struct {
	keytable.Entry // first: see asWord
	v              atomic.Int64
}

// The entry types of the tables start with their keytable.Entry, which
// the tables hold: asWord, asFW and asLocked convert it back to the entry
// it heads with unsafe.Pointer, a valid conversion since the Entry is at
// offset 0 of an allocation of the entry type (see keytable.Entry). It
// costs nothing at run time, and it keeps keytable's Table one compiled
// type: a generic table, compiled once per entry type, was 38 KB of the
// smallest memstore program (bench/cmd/binsize).
func _() {
	// An "invalid argument: index out of bounds" error here means an
	// entry type's keytable.Entry is no longer its first field.
	var x [1]struct{}
	_ = x[unsafe.Offsetof(wordEntry{}.Entry)]
	_ = x[unsafe.Offsetof(fwEntry{}.Entry)]
	_ = x[unsafe.Offsetof(lockedEntry{}.Entry)]
	_ = x[unsafe.Offsetof(swEntry{}.lockedEntry)]
	_ = x[unsafe.Offsetof(slEntry{}.lockedEntry)]
	_ = x[unsafe.Offsetof(limitsEntry{}.lockedEntry)]
}

// asWord returns the wordEntry that e heads, or nil for nil; e comes from
// a wordTable.
func asWord(e *keytable.Entry) *wordEntry { return (*wordEntry)(unsafe.Pointer(e)) }

// wordTable holds the word entries of one kind, shared by every
// configuration of it bound to the store.
type wordTable struct {
	*keytable.Table
	s *Store
}

func newWordTable(s *Store) *wordTable {
	return &wordTable{Table: newTable(s, func() *keytable.Entry { return &new(wordEntry).Entry }), s: s}
}

// newTable returns a keytable of the store's shards with the store's
// reclamation grace (see the package doc, "# Memory").
func newTable(s *Store, newE func() *keytable.Entry) *keytable.Table {
	t := keytable.New(s.shards, newE)
	t.SetGrace(int64(ReclaimGrace))
	return t
}

// entry returns the entry of key in keytable.Scope sc, adding one if needed.
// It probes the shard in place rather than through keytable's Find: the
// hot path of every decision, where a call more costs (see
// BenchmarkLimiterAllow).
func (t *wordTable) entry(sc *keytable.Scope, key string) *wordEntry {
	h := t.Hash(sc, key)
	sh := t.ShardOf(h)
	if slots := sh.Slots(); len(slots) > 0 {
		m := uint64(len(slots) - 1)
		for i := h & m; ; i = (i + 1) & m {
			e := slots[i].Load()
			if e == nil {
				break
			}
			if sc.Holds(e.Key(), key) {
				return asWord(e)
			}
		}
	}
	return asWord(t.Insert(sh, sc, key, h, wordReclaimer{}, t.s.nowNs, t.s.maxKeys))
}

func (t *wordTable) sweep(now int64) { t.SweepAll(wordReclaimer{}, now) }
func (t *wordTable) len() int        { return t.Len() }

// wordReclaimer reclaims bucket words: the word is the instant at which
// the bucket is restored.
type wordReclaimer struct{}

func (wordReclaimer) Kill(ke *keytable.Entry, now int64, force bool) bool {
	e := asWord(ke)
	w := e.v.Load()
	if w == dead || (!force && w > now) {
		return false
	}
	// Fails if a step changed the word since the load: the entry is in use.
	return e.v.CompareAndSwap(w, dead)
}

func (wordReclaimer) Held(e *keytable.Entry) (held, restoreAt int64, ok bool) {
	w := asWord(e).v.Load()
	// A bucket's debt in time is what it remembers; the units are that
	// debt over the configuration's interval, the same order for all keys.
	return 0, w, w != dead
}

// tbBound runs one token bucket configuration, normalized to Rate 1 per
// emission interval (the same bucket, without a division per step).
type tbBound struct {
	t   *wordTable
	sc  keytable.Scope
	a   floodgate.TokenBucket
	tau int64 // Burst emission intervals
}

// Apply executes one step on key; see floodgate.Bound.
func (b *tbBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	e := b.t.entry(&b.sc, key)
	for {
		now := b.t.s.clock()
		old := e.v.Load()
		if old == dead {
			// The entry was reclaimed after we found it; its key is gone
			// from the table by the time its shard lock is free again.
			e = b.t.entry(&b.sc, key)
			continue
		}
		next, res, err := step.TokenBucket(b.a, old, now, req)
		if err != nil {
			return res, err
		}
		if next == old || req.Check || e.v.CompareAndSwap(old, next) {
			return res, nil
		}
	}
}

// Take is Apply of a plain take without building the Result: a Result is
// ten words and Go copies structs of more than four fields through memory
// at every call boundary (measured: the copies were a quarter of a
// decision's time). A clock outside 1970 to 2255 and bad arguments take
// Apply's path, which reports them.
func (b *tbBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if !floodgate.ValidTake(key, n, b.a.Burst) {
		return b.slowTake(ctx, key, n)
	}
	e := b.t.entry(&b.sc, key)
	s := b.t.s
	for {
		// stepNow, its default clock written out: one call fewer a
		// decision.
		var now int64
		ok := true
		if s.now == nil {
			now = s.baseNs + int64(time.Since(s.base))
			ok = now >= 0
		} else {
			now, ok = s.stepNow()
		}
		if !ok {
			return b.slowTake(ctx, key, n)
		}
		old := e.v.Load()
		if old == dead {
			e = b.t.entry(&b.sc, key)
			continue
		}
		next, remaining, wait, reset, ok := take.Bucket(old, now, n, int64(b.a.Per), b.tau, 0)
		if !ok {
			return floodgate.Decision{Limit: b.a.Burst, Remaining: remaining, RetryAfter: time.Duration(wait), ResetAfter: time.Duration(reset)}, nil
		}
		if e.v.CompareAndSwap(old, next) {
			return floodgate.Decision{Allowed: true, Limit: b.a.Burst, Remaining: remaining, ResetAfter: time.Duration(reset)}, nil
		}
	}
}

func (b *tbBound) slowTake(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// lbBound runs one leaky bucket configuration, normalized as tbBound is.
type lbBound struct {
	t  *wordTable
	sc keytable.Scope
	a  floodgate.LeakyBucket
}

// Apply executes one step on key; see floodgate.Bound. It is tbBound.Apply
// with the leaky bucket's step: a shared loop taking the step as a func
// value would copy the Result once more per call (measured).
func (b *lbBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	e := b.t.entry(&b.sc, key)
	for {
		now := b.t.s.clock()
		old := e.v.Load()
		if old == dead {
			e = b.t.entry(&b.sc, key)
			continue
		}
		next, res, err := step.LeakyBucket(b.a, old, now, req)
		if err != nil {
			return res, err
		}
		if next == old || req.Check || e.v.CompareAndSwap(old, next) {
			return res, nil
		}
	}
}

// Take is Apply of a plain take.
func (b *lbBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// lockedEntry heads the entries of keys whose state is guarded by a
// mutex: swEntry, slEntry and limitsEntry, each a lockedEntry followed by
// its state. One lockedTable serves the three: a table generic in the
// state was compiled once per state type (12 KB more of the smallest
// memstore program, bench/cmd/binsize).
type lockedEntry struct {
	keytable.Entry // first: see asWord
	mu             sync.Mutex
	dead           bool // reclaimed: look the key up again
}

// asLocked returns the lockedEntry that e heads, or nil for nil; e comes
// from a lockedTable.
func asLocked(e *keytable.Entry) *lockedEntry { return (*lockedEntry)(unsafe.Pointer(e)) }

// swEntry is the state of a sliding window key.
type swEntry struct {
	lockedEntry // first: see asWord
	st          step.SlidingWindowState
}

// slEntry is the state of a sliding log key.
type slEntry struct {
	lockedEntry // first: see asWord
	st          step.SlidingLogState
}

// subEntry is the state of a sliding window key with sub-windows: counts
// of 4 bytes while they fit (half the memory of 8: 61 counts take a
// 256-byte allocation instead of 512), moved to 8-byte counts in wide
// for good when a step might not fit (step.ErrCountRange).
type subEntry struct {
	lockedEntry // first: see asWord
	st          step.SubWindowOf[uint32]
	wide        *step.SubWindowState // st is unused once set
}

// sw, sub, sl and limits return the state of e, which heads an entry of that
// kind (see asWord).
func (e *lockedEntry) sw() *step.SlidingWindowState { return &(*swEntry)(unsafe.Pointer(e)).st }
func (e *lockedEntry) sl() *step.SlidingLogState    { return &(*slEntry)(unsafe.Pointer(e)).st }
func (e *lockedEntry) sub() *subEntry               { return (*subEntry)(unsafe.Pointer(e)) }
func (e *lockedEntry) limits() *limitsState         { return &(*limitsEntry)(unsafe.Pointer(e)).st }

// lockedTable holds the entries of one kind whose state needs more than a
// word, each under its own mutex, shared by every configuration of the
// kind.
type lockedTable struct {
	*keytable.Table
	s *Store
	// held reports what e's state remembers and when it is restored, for
	// windows of w.
	held func(e *lockedEntry, w int64) (held, restoreAt int64)
	// maxW is the longest window of the configurations bound to the
	// table: a state is restored once that has passed, whichever of them
	// wrote it.
	maxW atomic.Int64
}

// newLockedTable returns a table of the entries newE allocates (it
// returns their keytable.Entry).
func newLockedTable(s *Store, newE func() *keytable.Entry, held func(*lockedEntry, int64) (int64, int64)) *lockedTable {
	return &lockedTable{s: s, Table: newTable(s, newE), held: held}
}

// entry returns the entry of key in sc, adding one if needed, locked and
// live. It probes the shard in place, as wordTable.lookup does.
func (t *lockedTable) entry(sc *keytable.Scope, key string) *lockedEntry {
	h := t.Hash(sc, key)
	sh := t.ShardOf(h)
	for {
		var ke *keytable.Entry
		if slots := sh.Slots(); len(slots) > 0 {
			m := uint64(len(slots) - 1)
			for i := h & m; ; i = (i + 1) & m {
				if ke = slots[i].Load(); ke == nil || sc.Holds(ke.Key(), key) {
					break
				}
			}
		}
		if ke == nil {
			ke = t.Insert(sh, sc, key, h, lockedReclaimer{t}, t.s.nowNs, t.s.maxKeys)
		}
		e := asLocked(ke)
		e.mu.Lock()
		if !e.dead {
			return e
		}
		// Reclaimed after we found it: its key is gone from the table by
		// the time its shard lock is free again.
		e.mu.Unlock()
	}
}

// apply runs fn on key's entry under its mutex, at the store's clock read
// under the lock, so that steps on one key see time in the order they
// run.
func (t *lockedTable) apply(sc *keytable.Scope, key string, fn func(e *lockedEntry, now time.Time) (floodgate.Result, error)) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	e := t.entry(sc, key)
	res, err := fn(e, t.s.clock())
	e.mu.Unlock()
	return res, err
}

func (t *lockedTable) sweep(now int64) { t.SweepAll(lockedReclaimer{t}, now) }
func (t *lockedTable) len() int        { return t.Len() }

type lockedReclaimer struct{ t *lockedTable }

func (r lockedReclaimer) Kill(ke *keytable.Entry, now int64, force bool) bool {
	e := asLocked(ke)
	if !e.mu.TryLock() { // in use: not idle
		return false
	}
	defer e.mu.Unlock()
	if e.dead {
		return false
	}
	if _, at := r.t.held(e, r.t.maxW.Load()); !force && at > now {
		return false
	}
	e.dead = true
	return true
}

func (r lockedReclaimer) Held(ke *keytable.Entry) (held, restoreAt int64, ok bool) {
	e := asLocked(ke)
	if !e.mu.TryLock() {
		return 0, 0, false
	}
	defer e.mu.Unlock()
	if e.dead {
		return 0, 0, false
	}
	held, restoreAt = r.t.held(e, r.t.maxW.Load())
	return held, restoreAt, true
}

// swBound runs one sliding window configuration.
type swBound struct {
	t  *lockedTable
	sc keytable.Scope
	a  floodgate.SlidingWindow
}

// Apply executes one step on key; see floodgate.Bound.
func (b *swBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	return b.t.apply(&b.sc, key, func(e *lockedEntry, now time.Time) (floodgate.Result, error) {
		st := e.sw()
		next, res, err := step.SlidingWindow(b.a, *st, now, req)
		if !req.Check {
			*st = next
		}
		return res, err
	})
}

// Take is Apply of a plain take.
func (b *swBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// swHeld: the counts remembered, until both windows have passed.
func swHeld(st *step.SlidingWindowState, w int64) (held, restoreAt int64) {
	switch {
	case st.Curr > 0:
		return st.Prev + st.Curr, st.Start + 2*w
	case st.Prev > 0:
		return st.Prev, st.Start + w
	}
	// An empty window reserved ahead keeps the windows before it closed:
	// forgetting it early would reopen them.
	return 0, st.Start
}

// subBound runs one sliding window configuration with sub-windows.
type subBound struct {
	t  *lockedTable
	sc keytable.Scope
	a  floodgate.SlidingWindow
}

// Apply executes one step on key; see floodgate.Bound.
func (b *subBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	return b.t.apply(&b.sc, key, func(e *lockedEntry, now time.Time) (floodgate.Result, error) {
		se := e.sub()
		if se.wide == nil {
			res, err := step.SubWindow(b.a, &se.st, now, req)
			if err != step.ErrCountRange {
				return res, err
			}
			w := se.st.Widen()
			se.wide, se.st = &w, step.SubWindowOf[uint32]{}
		}
		return step.SubWindow(b.a, se.wide, now, req)
	})
}

// Take is Apply of a plain take.
func (b *subBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// subHeld: the units counted, until the newest counted sub-window has left.
func subHeld(e *subEntry) (held, restoreAt int64) {
	if e.wide != nil {
		return subHeldOf(e.wide)
	}
	return subHeldOf(&e.st)
}

func subHeldOf[C step.SubCount](st *step.SubWindowOf[C]) (held, restoreAt int64) {
	if j, ok := st.LastCounted(); ok {
		return st.Total, (j + int64(len(st.Counts))) * st.Sub
	}
	return 0, math.MinInt64
}

// slBound runs one sliding log configuration.
type slBound struct {
	t  *lockedTable
	sc keytable.Scope
	a  floodgate.SlidingLog
}

// Apply executes one step on key; see floodgate.Bound.
func (b *slBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	return b.t.apply(&b.sc, key, func(e *lockedEntry, now time.Time) (floodgate.Result, error) {
		return step.SlidingLog(b.a, e.sl(), now, req)
	})
}

// slHeld: the units logged, until the newest has left the window.
func slHeld(st *step.SlidingLogState, w int64) (held, restoreAt int64) {
	if last, ok := st.Last(); ok {
		return st.Total(), last + w
	}
	return 0, math.MinInt64
}

// Take is Apply of a plain take.
func (b *slBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}
