package memstore

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// table is a sharded hash table from key to *E. Lookups take no lock; the
// state inside an entry is synchronized by the entry itself (an atomic word
// or the entry's mutex), never by the shard.
//
// Each shard is an open-addressing table of entry pointers with linear
// probing; entries hold their own key. Compared with a Go map of pointers
// this saves the 16-byte key header per slot, which is most of the memory of
// a token bucket key (see TestHeapPerKey).
//
// Writers (insertions, sweeps, evictions) hold the shard's mutex. Readers
// load the slot array and its slots atomically and may race with a writer:
// a reader can then miss a key that is present (it moved, or the array was
// replaced), and falls back to insert, which looks again under the mutex; or
// it can find an entry a sweep just removed, which the sweep marked dead
// first, and looks again. Neither outcome uses stale state.
type table[E any] struct {
	seed   maphash.Seed
	mask   uint64
	count  atomic.Int64 // entries in all shards
	keyOf  func(*E) string
	newE   func(key string) *E
	shards []shard[E]
}

type shard[E any] struct {
	mu    sync.Mutex
	slots atomic.Pointer[[]atomic.Pointer[E]] // a power of two in length, at most 7/8 full
	n     int
	// sweepAt is the entry count at which the next insertion sweeps the
	// shard first, so that idle entries are reclaimed in amortized O(1) per
	// insertion without a background goroutine.
	sweepAt int
	_       [32]byte // keep shard headers on separate cache lines
}

// minSweep is the shard size below which insertions never sweep.
const minSweep = 64

func newTable[E any](shards int, keyOf func(*E) string, newE func(string) *E) *table[E] {
	t := &table[E]{seed: maphash.MakeSeed(), mask: uint64(shards - 1), keyOf: keyOf, newE: newE, shards: make([]shard[E], shards)}
	for i := range t.shards {
		t.shards[i].sweepAt = minSweep
		t.shards[i].slots.Store(new([]atomic.Pointer[E]))
	}
	return t
}

func (t *table[E]) hash(key string) uint64 { return maphash.String(t.seed, key) }

// shardOf picks the shard from the high bits of h; slots use the low bits.
func (t *table[E]) shardOf(h uint64) *shard[E] { return &t.shards[(h>>40)&t.mask] }

// find returns the entry for key in sh, or nil.
func (t *table[E]) find(sh *shard[E], key string, h uint64) *E {
	slots := *sh.slots.Load()
	if len(slots) == 0 {
		return nil
	}
	m := uint64(len(slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		e := slots[i].Load()
		if e == nil || t.keyOf(e) == key {
			return e
		}
	}
}

// load returns the shard of key, the key's hash and its entry, or nil.
func (t *table[E]) load(key string) (*shard[E], uint64, *E) {
	h := t.hash(key)
	sh := t.shardOf(h)
	return sh, h, t.find(sh, key, h)
}

// put places e in slots, which has room. The caller holds sh.mu.
func (t *table[E]) put(slots []atomic.Pointer[E], e *E, h uint64) {
	m := uint64(len(slots) - 1)
	i := h & m
	for slots[i].Load() != nil {
		i = (i + 1) & m
	}
	slots[i].Store(e)
}

// rebuild rehashes the entries of sh that keep reports true into a new slot
// array sized for them and extra more (growing or shrinking it). Readers of
// the old array still find what it held. The caller holds sh.mu.
func (t *table[E]) rebuild(sh *shard[E], extra int, keep func(*E) bool) {
	old := *sh.slots.Load()
	live := make([]*E, 0, sh.n)
	for i := range old {
		if e := old[i].Load(); e != nil && keep(e) {
			live = append(live, e)
		}
	}
	size := 8
	for (len(live)+extra)*8 > size*7 {
		size *= 2
	}
	slots := make([]atomic.Pointer[E], size)
	for _, e := range live {
		t.put(slots, e, t.hash(t.keyOf(e)))
	}
	sh.n = len(live)
	sh.slots.Store(&slots)
}

// reclaimer is what sweeping a table needs from its entries.
type reclaimer[E any] interface {
	// kill marks e dead, so that no step uses it again, if it is restored
	// at now or if force is set; it reports whether it did. A busy entry may
	// be skipped.
	kill(e *E, now int64, force bool) bool
	// held returns what e remembers (the units it counts; 0 for a bucket,
	// whose debt is in restoreAt) and the instant at which it carries no
	// information, or false for an entry that is dead or busy.
	held(e *E) (held, restoreAt int64, ok bool)
}

// evictSample is the number of entries an eviction compares.
const evictSample = 8

// insert adds a fresh entry for key unless one exists, and returns the entry
// now in the table; init, if not nil, prepares a fresh entry before anyone
// can see it. Before adding, it reclaims restored entries of the shard when
// the shard has doubled since its last sweep, and evicts one entry when the
// table holds maxKeys entries.
func (t *table[E]) insert(sh *shard[E], key string, h uint64, r reclaimer[E], now func() int64, maxKeys int64, init ...func(*E)) *E {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := t.find(sh, key, h); e != nil {
		return e
	}
	// Count the new entry before checking the cap, so that concurrent
	// insertions into other shards see it and evict for it.
	total := t.count.Add(1)
	removed := 0
	if sh.n >= sh.sweepAt {
		removed += t.sweepLocked(sh, r, now(), false)
		sh.sweepAt = max(2*sh.n, minSweep)
	}
	if total-int64(removed) > maxKeys {
		evicted := t.evictLocked(sh, r, now())
		if evicted == 0 {
			evicted = t.evictElsewhere(sh, r, now())
		}
		removed += evicted
	}
	t.count.Add(int64(-removed))
	if (sh.n+1)*8 > len(*sh.slots.Load())*7 {
		t.rebuild(sh, 1, func(*E) bool { return true })
	}
	// Clone: the caller's key may share memory with a larger buffer that the
	// table must not keep alive.
	e := t.newE(strings.Clone(key))
	for _, f := range init {
		f(e)
	}
	t.put(*sh.slots.Load(), e, h)
	sh.n++
	return e
}

// sweepLocked deletes the restored entries of sh (with force, every entry
// kill accepts) and returns how many. The caller holds sh.mu for writing.
func (t *table[E]) sweepLocked(sh *shard[E], r reclaimer[E], now int64, force bool) int {
	before := sh.n
	t.rebuild(sh, 0, func(e *E) bool { return !r.kill(e, now, force) })
	return before - sh.n
}

// evictLocked deletes, among a few entries of sh, the one that remembers
// the least: the fewest units counted, then the soonest restored. A spent
// quota is never forgotten while a sampled entry holds less, so a
// key-rotation attack (a stream of new keys, each used once) evicts its own
// keys before the keys it spent. It returns 1 if it deleted one. The caller
// holds sh.mu for writing.
func (t *table[E]) evictLocked(sh *shard[E], r reclaimer[E], now int64) int {
	if sh.n == 0 {
		return 0
	}
	var (
		victim           *E
		at               uint64
		bestHeld, bestAt int64
		seen             int
	)
	slots := *sh.slots.Load()
	m := uint64(len(slots) - 1)
	start := uint64(now) * 0x9E3779B97F4A7C15 >> 40 // spread the samples
	for i := range uint64(len(slots)) {
		j := (start + i) & m
		e := slots[j].Load()
		if e == nil {
			continue
		}
		held, when, ok := r.held(e)
		if when <= now {
			held = 0 // restored: it remembers nothing
		}
		if ok && (victim == nil || held < bestHeld || (held == bestHeld && when < bestAt)) {
			victim, at, bestHeld, bestAt = e, j, held, when
		}
		if seen++; seen == evictSample || (ok && when <= now) {
			break
		}
	}
	if victim == nil || !r.kill(victim, now, true) {
		return 0
	}
	t.deleteAt(sh, at)
	return 1
}

// evictElsewhere evicts from the first other shard whose lock is free and
// that has an entry to evict, for a full table whose inserting shard is
// empty. The caller holds sh.mu; TryLock keeps shard locks free of cycles.
func (t *table[E]) evictElsewhere(sh *shard[E], r reclaimer[E], now int64) int {
	for i := range t.shards {
		o := &t.shards[i]
		if o == sh || !o.mu.TryLock() {
			continue
		}
		n := t.evictLocked(o, r, now)
		o.mu.Unlock()
		if n > 0 {
			return n
		}
	}
	return 0
}

// deleteAt empties slot i of sh, shifting back the entries of its probe run
// that would no longer be found. The caller holds sh.mu.
func (t *table[E]) deleteAt(sh *shard[E], i uint64) {
	slots := *sh.slots.Load()
	m := uint64(len(slots) - 1)
	for j := (i + 1) & m; slots[j].Load() != nil; j = (j + 1) & m {
		e := slots[j].Load()
		home := t.hash(t.keyOf(e)) & m
		// The entry at j may move to i unless its home lies cyclically in
		// (i, j].
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			slots[i].Store(e)
			i = j
		}
	}
	slots[i].Store(nil)
	sh.n--
}

// sweepAll deletes the restored entries of every shard.
func (t *table[E]) sweepAll(r reclaimer[E], now int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		t.count.Add(int64(-t.sweepLocked(sh, r, now, false)))
		sh.sweepAt = max(2*sh.n, minSweep)
		sh.mu.Unlock()
	}
}

// size returns the number of entries.
func (t *table[E]) size() int { return int(t.count.Load()) }
