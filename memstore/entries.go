package memstore

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/take"
)

// dead marks a word entry that a sweep removed from its table. A step that
// loads it looks the key up again. No algorithm stores this value: times
// are far from math.MinInt64 and packed fixed windows stay above it.
const dead = math.MinInt64

// wordEntry is the state of a key whose algorithm state fits one word.
type wordEntry struct {
	v   atomic.Int64
	key string
}

// wordKind names the algorithm of a wordTable.
type wordKind uint8

const (
	wordTB wordKind = iota
	wordLB
	wordFW
)

func newWordTable(s *Store, kind wordKind, tb floodgate.TokenBucket, lb floodgate.LeakyBucket, fw fwPacking) *wordTable {
	return &wordTable{
		table: newTable(s.shards,
			func(e *wordEntry) string { return e.key },
			func(key string) *wordEntry { return &wordEntry{key: key} }),
		s:     s,
		kind:  kind,
		tb:    tb,
		tau:   tb.Burst * int64(tb.Per),
		lb:    lb,
		quota: max(tb.Burst, lb.Capacity, fw.a.Limit),
		fw:    fw,
	}
}

// wordTable runs an algorithm whose state is one word, updated with
// compare-and-swap: no lock is held while the step runs. It switches on
// the algorithm rather than calling through a func value or a type
// parameter, so that each Step is a direct call (measured: a func value's
// wrapper and a generic method's dictionary wrapper each copy the Result
// once more).
type wordTable struct {
	*table[wordEntry]
	s     *Store
	kind  wordKind
	tb    floodgate.TokenBucket
	tau   int64 // tb's tolerance: Burst emission intervals
	lb    floodgate.LeakyBucket
	fw    fwPacking
	quota int64 // the algorithm's Limit, Burst or Capacity
}

// restoreAt returns the instant at which word carries no information.
func (t *wordTable) restoreAt(w int64) int64 {
	if t.kind == wordFW {
		return t.fw.restoreAt(w)
	}
	return w // the buckets' theoretical arrival time and tail
}

// Apply executes one step on key; see floodgate.Bound.
func (t *wordTable) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return floodgate.Result{}, floodgate.CheckKey(key)
	}
	sh, h, e := t.lookup(key)
	for {
		if e == nil {
			e = t.insert(sh, key, h, wordReclaimer{t}, t.s.nowNs, t.s.maxKeys)
		}
		for {
			now := t.s.clock()
			old := e.v.Load()
			if old == dead {
				break
			}
			// The switch is written here rather than in a method: a method
			// returning the Result would copy it once more.
			var (
				next int64
				res  floodgate.Result
				err  error
			)
			switch t.kind {
			case wordTB:
				next, res, err = t.tb.Step(old, now, req)
			case wordLB:
				next, res, err = t.lb.Step(old, now, req)
			default:
				next, res, err = t.fw.step(old, now, req)
			}
			if err != nil {
				return res, err
			}
			if next == old || e.v.CompareAndSwap(old, next) {
				return res, nil
			}
		}
		// The entry was reclaimed after we found it; its key is gone from
		// the table by the time its shard lock is free again.
		_, _, e = t.lookup(key)
	}
}

// Take is Apply of a plain take (OpTake, no delay) returning the Decision's
// fields that vary: floodgate.New finds it on the token bucket's and the
// fixed window's tables, and Allow and AllowN call it. A Result is ten words
// and a Decision six, and Go copies structs of more than four fields
// through memory at every call boundary; these scalars stay in registers
// (measured: the copies were a quarter of a decision's time). The leaky
// bucket, a clock outside 1970 to 2262 and bad arguments take Apply's path,
// which reports them.
func (t *wordTable) Take(ctx context.Context, key string, n int64) (allowed bool, remaining int64, retryAfter, resetAfter time.Duration, err error) {
	if t.kind == wordLB || key == "" || len(key) > floodgate.MaxKeyLen || n < 1 || n > t.quota {
		return t.slowTake(ctx, key, n)
	}
	sh, h, e := t.lookup(key)
	for {
		if e == nil {
			e = t.insert(sh, key, h, wordReclaimer{t}, t.s.nowNs, t.s.maxKeys)
		}
		for {
			now, ok := t.s.stepNow()
			if !ok {
				return t.slowTake(ctx, key, n)
			}
			old := e.v.Load()
			if old == dead {
				break
			}
			var next, remaining, wait, reset int64
			if t.kind == wordTB {
				next, remaining, wait, reset, ok = take.Bucket(old, now, n, int64(t.tb.Per), t.tau, 0)
			} else {
				st := t.fw.decode(old)
				st.Start, st.Count, remaining, wait, reset, ok = take.Window(st.Start, st.Count, now, n, t.fw.a.Limit, t.fw.w, 0)
				next = t.fw.encode(st)
			}
			if !ok {
				return false, remaining, time.Duration(wait), time.Duration(reset), nil
			}
			if e.v.CompareAndSwap(old, next) {
				return true, remaining, 0, time.Duration(reset), nil
			}
		}
		// The entry was reclaimed after we found it: look again.
		_, _, e = t.lookup(key)
	}
}

// slowTake is Take through Apply.
func (t *wordTable) slowTake(ctx context.Context, key string, n int64) (bool, int64, time.Duration, time.Duration, error) {
	res, err := t.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n})
	return res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter, err
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

func (t *wordTable) sweep(now int64) { t.sweepAll(wordReclaimer{t}, now) }
func (t *wordTable) len() int        { return t.size() }

type wordReclaimer struct{ t *wordTable }

func (r wordReclaimer) kill(e *wordEntry, now int64, force bool) bool {
	w := e.v.Load()
	if w == dead || (!force && r.t.restoreAt(w) > now) {
		return false
	}
	// Fails if a step changed the word since the load: the entry is in use.
	return e.v.CompareAndSwap(w, dead)
}

func (r wordReclaimer) restoreAt(e *wordEntry) (int64, bool) {
	w := e.v.Load()
	if w == dead {
		return 0, false
	}
	return r.t.restoreAt(w), true
}

// lockedEntry is the state of a key guarded by a mutex.
type lockedEntry[S any] struct {
	key  string
	mu   sync.Mutex
	dead bool // reclaimed: look the key up again
	st   S
}

// lockedTable runs an algorithm whose state needs more than a word under a
// per-key mutex.
type lockedTable[S any] struct {
	*table[lockedEntry[S]]
	s         *Store
	step      func(*S, time.Time, floodgate.Request) (floodgate.Result, error)
	restoreAt func(*S) int64
}

func newLockedTable[S any](s *Store, step func(*S, time.Time, floodgate.Request) (floodgate.Result, error), restoreAt func(*S) int64) *lockedTable[S] {
	return &lockedTable[S]{
		s: s,
		table: newTable(s.shards,
			func(e *lockedEntry[S]) string { return e.key },
			func(key string) *lockedEntry[S] { return &lockedEntry[S]{key: key} }),
		step:      step,
		restoreAt: restoreAt,
	}
}

// Apply executes one step on key; see floodgate.Bound.
func (t *lockedTable[S]) Apply(_ context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return floodgate.Result{}, floodgate.CheckKey(key)
	}
	sh, h, e := t.load(key)
	for {
		if e == nil {
			e = t.insert(sh, key, h, lockedReclaimer[S]{t}, t.s.nowNs, t.s.maxKeys)
		}
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			_, _, e = t.load(key)
			continue
		}
		// The clock is read under the lock so that steps on one key see
		// time in the order they run.
		res, err := t.step(&e.st, t.s.clock(), req)
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
	if e.dead || (!force && r.t.restoreAt(&e.st) > now) {
		return false
	}
	e.dead = true
	return true
}

func (r lockedReclaimer[S]) restoreAt(e *lockedEntry[S]) (int64, bool) {
	if !e.mu.TryLock() {
		return 0, false
	}
	defer e.mu.Unlock()
	if e.dead {
		return 0, false
	}
	return r.t.restoreAt(&e.st), true
}

// fwPacking stores a fixed window's state in one word: the window index in
// the high bits and the count in the low bits.
type fwPacking struct {
	a     floodgate.FixedWindow
	w     int64
	shift uint
	mask  int64
}

// packHorizon is how far ahead of the store's creation a packed fixed window
// must stay exact.
const packHorizon = 200 * 365 * 24 * time.Hour

// newFWPacking returns the packing of a, or false when the limit leaves too
// few bits for window indices until packHorizon from now.
func newFWPacking(a floodgate.FixedWindow, now int64) (fwPacking, bool) {
	w := int64(a.Window)
	shift := uint(bits.Len64(uint64(a.Limit)))
	if shift > 62 {
		return fwPacking{}, false
	}
	maxIndex := int64(1)<<(62-shift) - 1
	if now < 0 || now/w+int64(packHorizon)/w+2 > maxIndex {
		return fwPacking{}, false
	}
	return fwPacking{a: a, w: w, shift: shift, mask: 1<<shift - 1}, true
}

func (p fwPacking) decode(word int64) floodgate.FixedWindowState {
	return floodgate.FixedWindowState{Start: (word >> p.shift) * p.w, Count: word & p.mask}
}

func (p fwPacking) encode(st floodgate.FixedWindowState) int64 {
	return (st.Start/p.w)<<p.shift | st.Count
}

func (p fwPacking) step(word int64, now time.Time, req floodgate.Request) (int64, floodgate.Result, error) {
	next, res, err := p.a.Step(p.decode(word), now, req)
	return p.encode(next), res, err
}

func (p fwPacking) restoreAt(word int64) int64 { return fwRestoreAt(p.decode(word), p.w) }
