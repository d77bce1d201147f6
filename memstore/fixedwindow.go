package memstore

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keytable"
	"github.com/floodgate-go/floodgate/internal/take"
	"github.com/floodgate-go/floodgate/step"
)

// A fixed window key's state is one word in the packing of the
// configuration that created the entry (the window index in the high bits,
// the count in the low bits), updated with compare-and-swap. A key touched
// by a configuration with another packing (a changed window or a limit
// that needs more bits, or a limit too large to pack) moves its state, for
// the rest of the entry's life, into a FixedWindowState under a mutex:
// every configuration then reads and writes the same state, as the
// contract of floodgate.Store requires, at the cost of the lock.

// slow marks a fixed window word whose state moved to fwEntry.slow. No
// packing produces it.
const slow = dead + 1

// fwEntry is the state of a fixed window key.
type fwEntry struct {
	keytable.Entry              // first: see asWord
	v              atomic.Int64 // packed in pack, dead, or slow
	pack           fwPacking    // immutable; not ok for an entry born slow
	slow           atomic.Pointer[fwSlow]
}

// asFW returns the fwEntry that e heads, or nil for nil; e comes from an
// fwTable.
func asFW(e *keytable.Entry) *fwEntry { return (*fwEntry)(unsafe.Pointer(e)) }

// fwSlow is a fixed window state under a mutex.
type fwSlow struct {
	mu    sync.Mutex
	ready bool // st holds the state (moved from the word)
	dead  bool // reclaimed: look the key up again
	st    step.FixedWindowState
}

// fwTable holds the fixed window entries of a store.
type fwTable struct {
	*keytable.Table
	s    *Store
	maxW atomic.Int64 // the longest window bound, for slow entries
}

func newFWTable(s *Store) *fwTable {
	return &fwTable{Table: newTable(s, func() *keytable.Entry { return &new(fwEntry).Entry }), s: s}
}

// fwPacking stores a fixed window's state in one word: the window index in
// the high bits and the count in the low bits. The zero value (not ok)
// packs nothing.
type fwPacking struct {
	w     int64
	shift uint8
	ok    bool
}

// packHorizon is how far ahead of the store's creation a packed fixed window
// must stay exact.
const packHorizon = 200 * 365 * 24 * time.Hour

// newFWPacking returns the packing of a, or false when the limit leaves too
// few bits for window indices until packHorizon from now.
func newFWPacking(a floodgate.FixedWindow, now int64) fwPacking {
	w := int64(a.Window)
	// Counts reach 2·Limit: a settlement charges up to one quota of debt.
	shift := uint(bits.Len64(uint64(a.Limit))) + 1
	if shift > 62 {
		return fwPacking{}
	}
	maxIndex := int64(1)<<(62-shift) - 1
	if now < 0 || now/w+int64(packHorizon)/w+2 > maxIndex {
		return fwPacking{}
	}
	return fwPacking{w: w, shift: uint8(shift), ok: true}
}

func (p fwPacking) decode(word int64) step.FixedWindowState {
	return step.FixedWindowState{Start: (word >> p.shift) * p.w, Count: word & (1<<p.shift - 1)}
}

func (p fwPacking) encode(st step.FixedWindowState) int64 {
	return (st.Start/p.w)<<p.shift | st.Count
}

// same reports whether p and q both pack, and pack states alike.
func (p fwPacking) same(q fwPacking) bool {
	return p.ok && q.ok && p.w == q.w && p.shift == q.shift
}

// fwRestoreAt returns the instant a fixed window state of windows of w
// carries no information: the end of its window or, for an empty one, its
// start (an empty window reserved ahead keeps the windows before it
// closed).
func fwRestoreAt(st step.FixedWindowState, w int64) int64 {
	if st.Count == 0 {
		return st.Start
	}
	return st.Start + w
}

// entry returns the entry of key in keytable.Scope sc, adding one packed in pack
// (born slow if pack is not ok).
func (t *fwTable) entry(sc *keytable.Scope, key string, pack fwPacking) *fwEntry {
	h := t.Hash(sc, key)
	sh := t.ShardOf(h)
	if e := t.Find(sh, sc, key, h); e != nil {
		return asFW(e)
	}
	return asFW(t.Insert(sh, sc, key, h, fwReclaimer{t}, t.s.nowNs, t.s.maxKeys, func(ke *keytable.Entry) {
		e := asFW(ke)
		e.pack = pack
		if !pack.ok {
			e.v.Store(slow)
			e.slow.Store(&fwSlow{ready: true})
		}
	}))
}

// toSlow returns e's slow state, moving the word into it first if needed,
// locked; nil when e was reclaimed.
func (e *fwEntry) toSlow() *fwSlow {
	s := e.slow.Load()
	if s == nil {
		e.slow.CompareAndSwap(nil, &fwSlow{})
		s = e.slow.Load()
	}
	s.mu.Lock()
	for !s.ready && !s.dead {
		v := e.v.Load()
		if v == dead {
			s.dead = true
			break
		}
		if v == slow {
			// Only a holder of s.mu sets slow, after setting ready.
			panic("memstore: unreachable: a fixed window word is slow without its state")
		}
		if e.v.CompareAndSwap(v, slow) {
			s.st, s.ready = e.pack.decode(v), true
		}
	}
	if s.dead {
		s.mu.Unlock()
		return nil
	}
	return s
}

func (t *fwTable) sweep(now int64) { t.SweepAll(fwReclaimer{t}, now) }
func (t *fwTable) len() int        { return t.Len() }

type fwReclaimer struct{ t *fwTable }

func (r fwReclaimer) Kill(ke *keytable.Entry, now int64, force bool) bool {
	e := asFW(ke)
	w := e.v.Load()
	switch w {
	case dead:
		return false
	case slow:
		s := e.slow.Load()
		if !s.mu.TryLock() {
			return false
		}
		defer s.mu.Unlock()
		if s.dead || (!force && fwRestoreAt(s.st, r.t.maxW.Load()) > now) {
			return false
		}
		s.dead = true
		return true
	}
	if !force && fwRestoreAt(e.pack.decode(w), e.pack.w) > now {
		return false
	}
	// Fails if a step changed the word since the load: the entry is in
	// use (or moved to slow, which kill then skips).
	return e.v.CompareAndSwap(w, dead)
}

func (r fwReclaimer) Held(ke *keytable.Entry) (held, restoreAt int64, ok bool) {
	e := asFW(ke)
	w := e.v.Load()
	switch w {
	case dead:
		return 0, 0, false
	case slow:
		s := e.slow.Load()
		if !s.mu.TryLock() {
			return 0, 0, false
		}
		defer s.mu.Unlock()
		if s.dead {
			return 0, 0, false
		}
		return s.st.Count, fwRestoreAt(s.st, r.t.maxW.Load()), true
	}
	st := e.pack.decode(w)
	return st.Count, fwRestoreAt(st, e.pack.w), true
}

// fwBound runs one fixed window configuration.
type fwBound struct {
	t    *fwTable
	sc   keytable.Scope
	a    floodgate.FixedWindow
	pack fwPacking // not ok when a's states do not fit a word
}

// Apply executes one step on key; see floodgate.Bound.
func (b *fwBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	e := b.t.entry(&b.sc, key, b.pack)
	for {
		old := e.v.Load()
		switch {
		case old == dead:
			e = b.t.entry(&b.sc, key, b.pack)
			continue
		case old == slow || !e.pack.same(b.pack):
			s := e.toSlow()
			if s == nil {
				e = b.t.entry(&b.sc, key, b.pack)
				continue
			}
			next, res, err := step.FixedWindow(b.a, s.st, b.t.s.clock(), req)
			if !req.Check {
				s.st = next
			}
			s.mu.Unlock()
			return res, err
		}
		next, res, err := step.FixedWindow(b.a, b.pack.decode(old), b.t.s.clock(), req)
		if err != nil {
			return res, err
		}
		if nw := b.pack.encode(next); nw == old || req.Check || e.v.CompareAndSwap(old, nw) {
			return res, nil
		}
	}
}

// Take is Apply of a plain take without building the Result, as for the
// token bucket.
func (b *fwBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if !b.pack.ok || !floodgate.ValidTake(key, n, b.a.Limit) {
		return b.slowTake(ctx, key, n)
	}
	e := b.t.entry(&b.sc, key, b.pack)
	for {
		now, ok := b.t.s.stepNow()
		if !ok || !e.pack.same(b.pack) {
			return b.slowTake(ctx, key, n)
		}
		old := e.v.Load()
		if old == dead {
			e = b.t.entry(&b.sc, key, b.pack)
			continue
		}
		if old == slow {
			return b.slowTake(ctx, key, n)
		}
		st := b.pack.decode(old)
		var remaining, wait, reset int64
		st.Start, st.Count, remaining, wait, reset, ok = take.Window(st.Start, st.Count, now, n, b.a.Limit, b.pack.w, 0)
		if !ok {
			return floodgate.Decision{Limit: b.a.Limit, Remaining: remaining, RetryAfter: time.Duration(wait), ResetAfter: time.Duration(reset)}, nil
		}
		if e.v.CompareAndSwap(old, b.pack.encode(st)) {
			return floodgate.Decision{Allowed: true, Limit: b.a.Limit, Remaining: remaining, ResetAfter: time.Duration(reset)}, nil
		}
	}
}

func (b *fwBound) slowTake(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}
