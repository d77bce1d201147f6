package memstore

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
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
	v   atomic.Int64
	key string
}

// wordTable holds the word entries of one kind, shared by every
// configuration of it bound to the store.
type wordTable struct {
	*table[wordEntry]
	s *Store
}

func newWordTable(s *Store) *wordTable {
	return &wordTable{
		table: newTable(s.shards,
			func(e *wordEntry) string { return e.key },
			func(key string) *wordEntry { return &wordEntry{key: key} }),
		s: s,
	}
}

// lookup is table.load for word entries, comparing keys in place rather
// than through the table's keyOf func: the hot path of every decision
// (callgrind: 40 instructions a decision fewer).
func (t *wordTable) lookup(key string) (*shard[wordEntry], uint64, *wordEntry) {
	h := t.hash(key)
	sh := t.shardOf(h)
	slots := *sh.slots.Load()
	if len(slots) == 0 {
		return sh, h, nil
	}
	m := uint64(len(slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		if e := slots[i].Load(); e == nil || e.key == key {
			return sh, h, e
		}
	}
}

// entry returns key's entry, adding one if needed.
func (t *wordTable) entry(key string) *wordEntry {
	sh, h, e := t.lookup(key)
	if e == nil {
		e = t.insert(sh, key, h, wordReclaimer{}, t.s.nowNs, t.s.maxKeys)
	}
	return e
}

func (t *wordTable) sweep(now int64) { t.sweepAll(wordReclaimer{}, now) }
func (t *wordTable) len() int        { return t.size() }

// wordReclaimer reclaims bucket words: the word is the instant at which
// the bucket is restored.
type wordReclaimer struct{}

func (wordReclaimer) kill(e *wordEntry, now int64, force bool) bool {
	w := e.v.Load()
	if w == dead || (!force && w > now) {
		return false
	}
	// Fails if a step changed the word since the load: the entry is in use.
	return e.v.CompareAndSwap(w, dead)
}

func (wordReclaimer) held(e *wordEntry) (held, restoreAt int64, ok bool) {
	w := e.v.Load()
	// A bucket's debt in time is what it remembers; the units are that
	// debt over the configuration's interval, the same order for all keys.
	return 0, w, w != dead
}

// tbBound runs one token bucket configuration, normalized to Rate 1 per
// emission interval (the same bucket, without a division per step).
type tbBound struct {
	t   *wordTable
	a   floodgate.TokenBucket
	tau int64 // Burst emission intervals
}

// Apply executes one step on key; see floodgate.Bound.
func (b *tbBound) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return floodgate.Result{}, step.CheckKey(key)
	}
	e := b.t.entry(key)
	for {
		now := b.t.s.clock()
		old := e.v.Load()
		if old == dead {
			// The entry was reclaimed after we found it; its key is gone
			// from the table by the time its shard lock is free again.
			e = b.t.entry(key)
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
// decision's time). A clock outside 1970 to 2262 and bad arguments take
// Apply's path, which reports them.
func (b *tbBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen || n < 1 || n > b.a.Burst {
		return b.slowTake(ctx, key, n)
	}
	e := b.t.entry(key)
	for {
		now, ok := b.t.s.stepNow()
		if !ok {
			return b.slowTake(ctx, key, n)
		}
		old := e.v.Load()
		if old == dead {
			e = b.t.entry(key)
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
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
	return res.Decision, err
}

// lbBound runs one leaky bucket configuration, normalized as tbBound is.
type lbBound struct {
	t *wordTable
	a floodgate.LeakyBucket
}

// Apply executes one step on key; see floodgate.Bound. It is tbBound.Apply
// with the leaky bucket's step: a shared loop taking the step as a func
// value would copy the Result once more per call (measured).
func (b *lbBound) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return floodgate.Result{}, step.CheckKey(key)
	}
	e := b.t.entry(key)
	for {
		now := b.t.s.clock()
		old := e.v.Load()
		if old == dead {
			e = b.t.entry(key)
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
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
	return res.Decision, err
}

// lockedEntry is the state of a key guarded by a mutex.
type lockedEntry[S any] struct {
	key  string
	mu   sync.Mutex
	dead bool // reclaimed: look the key up again
	st   S
}

// lockedTable holds the entries of one kind whose state needs more than a
// word, each under its own mutex, shared by every configuration of the
// kind.
type lockedTable[S any] struct {
	*table[lockedEntry[S]]
	s *Store
	// held reports what a state remembers and when it is restored, for
	// windows of w.
	held func(st *S, w int64) (held, restoreAt int64)
	// maxW is the longest window of the configurations bound to the
	// table: a state is restored once that has passed, whichever of them
	// wrote it.
	maxW atomic.Int64
}

func newLockedTable[S any](s *Store, held func(*S, int64) (int64, int64)) *lockedTable[S] {
	return &lockedTable[S]{
		s: s,
		table: newTable(s.shards,
			func(e *lockedEntry[S]) string { return e.key },
			func(key string) *lockedEntry[S] { return &lockedEntry[S]{key: key} }),
		held: held,
	}
}

// apply runs fn on key's state under the entry's mutex, at the store's
// clock read under the lock, so that steps on one key see time in the
// order they run.
func (t *lockedTable[S]) apply(key string, fn func(st *S, now time.Time) (floodgate.Result, error)) (floodgate.Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return floodgate.Result{}, step.CheckKey(key)
	}
	sh, h, e := t.load(key)
	for {
		if e == nil {
			e = t.insert(sh, key, h, lockedReclaimer[S]{t}, t.s.nowNs, t.s.maxKeys)
		}
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			sh, h, e = t.load(key)
			continue
		}
		res, err := fn(&e.st, t.s.clock())
		e.mu.Unlock()
		return res, err
	}
}

func (t *lockedTable[S]) sweep(now int64) { t.sweepAll(lockedReclaimer[S]{t}, now) }
func (t *lockedTable[S]) len() int        { return t.size() }

type lockedReclaimer[S any] struct{ t *lockedTable[S] }

func (r lockedReclaimer[S]) kill(e *lockedEntry[S], now int64, force bool) bool {
	if !e.mu.TryLock() { // in use: not idle
		return false
	}
	defer e.mu.Unlock()
	if e.dead {
		return false
	}
	if _, at := r.t.held(&e.st, r.t.maxW.Load()); !force && at > now {
		return false
	}
	e.dead = true
	return true
}

func (r lockedReclaimer[S]) held(e *lockedEntry[S]) (held, restoreAt int64, ok bool) {
	if !e.mu.TryLock() {
		return 0, 0, false
	}
	defer e.mu.Unlock()
	if e.dead {
		return 0, 0, false
	}
	held, restoreAt = r.t.held(&e.st, r.t.maxW.Load())
	return held, restoreAt, true
}

// swBound runs one sliding window configuration.
type swBound struct {
	t *lockedTable[step.SlidingWindowState]
	a floodgate.SlidingWindow
}

// Apply executes one step on key; see floodgate.Bound.
func (b *swBound) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	return b.t.apply(key, func(st *step.SlidingWindowState, now time.Time) (floodgate.Result, error) {
		next, res, err := step.SlidingWindow(b.a, *st, now, req)
		if !req.Check {
			*st = next
		}
		return res, err
	})
}

// Take is Apply of a plain take.
func (b *swBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
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

// slBound runs one sliding log configuration.
type slBound struct {
	t *lockedTable[step.SlidingLogState]
	a floodgate.SlidingLog
}

// Apply executes one step on key; see floodgate.Bound.
func (b *slBound) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	return b.t.apply(key, func(st *step.SlidingLogState, now time.Time) (floodgate.Result, error) {
		return step.SlidingLog(b.a, st, now, req)
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
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
	return res.Decision, err
}
