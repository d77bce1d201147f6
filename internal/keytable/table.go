// Package keytable is the sharded hash table of per-key state that
// memstore and package inflight's in-process store keep their entries in:
// lock-free lookups, a mutex per shard for writers, reclamation of idle
// entries as the table grows, and eviction at a cap.
package keytable

import (
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Table is a sharded hash table from (Scope, key) to entries. Lookups take
// no lock; the state inside an entry is synchronized by the entry itself
// (an atomic word or the entry's mutex), never by the shard.
//
// A Scope is a limiter name's (see NewScope): an entry holds its key
// as the Scope's prefix followed by the caller's key, so that one table
// keeps the keys of every name bound to the store apart without a field
// more per entry (a prefix is one byte for the first 127 names).
//
// Each shard is an open-addressing table of entry pointers with linear
// probing; entries hold their own key. Compared with a Go map of pointers
// this saves the 16-byte key header per slot, which is most of the memory of
// a token bucket key (see TestHeapPerKey).
//
// The table holds every kind of entry as a pointer to its Entry, the
// first field of the caller's entry type, which the caller converts back
// (see Entry). Table is not generic on purpose: a generic table is
// compiled once per entry type, and memstore's six kinds of entries made
// it 38 KB of code, a twentieth of the smallest memstore program's binary
// (go tool nm -size; bench/cmd/binsize measures the program).
//
// Writers (insertions, sweeps, evictions) hold the shard's mutex. Readers
// load the slot array and its slots atomically and may race with a writer:
// a reader can then miss a key that is present (it moved, or the array was
// replaced), and falls back to insert, which looks again under the mutex; or
// it can find an entry a sweep just removed, which the sweep marked dead
// first, and looks again. Neither outcome uses stale state.
//
// Table is safe for concurrent use; create one with New.
type Table struct {
	seed   maphash.Seed // of keys longer than 16 bytes
	short  uint64       // the seed of shorter keys (hashString)
	mask   uint64
	count  atomic.Int64 // entries in all shards
	grace  int64        // ns; see SetGrace
	newE   func() *Entry
	shards []Shard
}

// Entry is the head of a table's entries: its stored key (its Scope's
// prefix and the caller's key). An entry type has an Entry as its first
// field, so that the *Entry the table holds is also a pointer to the
// whole entry, which its owner converts back with unsafe.Pointer (the
// conversion is valid: the pointer points to the start of an allocation of
// the entry type). The owner asserts the field's offset at compile time.
type Entry struct {
	key string
}

// Key returns e's stored key: its Scope's prefix and the caller's key.
func (e *Entry) Key() string { return e.key }

// Shard is one shard of a Table: an open-addressing array of entry
// pointers and the mutex of its writers.
type Shard struct {
	mu    sync.Mutex
	slots atomic.Pointer[[]atomic.Pointer[Entry]] // a power of two in length, at most 7/8 full
	n     int
	// sweepAt is the entry count at which the next insertion sweeps the
	// shard first, so that idle entries are reclaimed in amortized O(1) per
	// insertion without a background goroutine.
	sweepAt int
	_       [32]byte // keep shard headers on separate cache lines
}

// Slots returns the shard's slot array, for a caller that probes it
// without a lock as Find does (memstore's hot paths inline their probe).
func (sh *Shard) Slots() []atomic.Pointer[Entry] { return *sh.slots.Load() }

// minSweep is the shard size below which insertions never sweep.
const minSweep = 64

// New returns a Table of shards shards (a power of two). newE allocates a
// zero entry of the caller's type and returns its Entry field, the first;
// the table sets its key.
func New(shards int, newE func() *Entry) *Table {
	t := &Table{seed: maphash.MakeSeed(), short: rand.Uint64(), mask: uint64(shards - 1), newE: newE, shards: make([]Shard, shards)}
	for i := range t.shards {
		t.shards[i].sweepAt = minSweep
		t.shards[i].slots.Store(new([]atomic.Pointer[Entry]))
	}
	return t
}

// SetGrace sets how long, in nanoseconds, an entry stays restored before
// the sweeps of insertions reclaim it; SweepAll reclaims it at once. A key
// called again within the grace finds its entry and allocates nothing,
// where a reclaimed key is inserted again (a new entry and its key). Call
// it before the table is used; the default is 0.
//
// Entries are not reused for other keys instead: lookups take no lock, so
// a caller may still hold an entry that a sweep removed, and if the entry
// then served another key, that caller would read and change the other
// key's state.
func (t *Table) SetGrace(ns int64) { t.grace = max(ns, 0) }

// Hash returns the hash of key in scope sc.
func (t *Table) Hash(sc *Scope, key string) uint64 {
	return hashString(t.short, &t.seed, key) ^ sc.mix
}

// hashString hashes s: a key of at most 16 bytes, most keys (a user id,
// an address), in a few instructions where maphash.String makes three
// calls (a quarter of a decision's instructions, callgrind), and a longer
// one with maphash.String and seed long. A short key is read
// as two words, its first and last 8 bytes (or 4, or 3 bytes for a
// shorter key), which overlap for a key shorter than 16 and together
// cover every byte, and mixes them with the length and a random seed by
// 128-bit products folded to 64 bits, the mixing of the wyhash family
// (which Go's runtime uses where AES instructions are missing): with a
// seed drawn per table, a client cannot choose keys that collide.
func hashString(seed uint64, long *maphash.Seed, s string) uint64 {
	var a, b uint64
	switch n := len(s); {
	case n > 16:
		return maphash.String(*long, s)
	case n >= 8:
		a, b = le64(s), le64(s[n-8:])
	case n >= 4:
		a, b = le32(s), le32(s[n-4:])
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	return fold(fold(a^seed^0x9E3779B97F4A7C15, b^seed^0xC2B2AE3D27D4EB4F)^uint64(len(s)), 0x165667B19E3779F9^seed)
}

// fold returns the 128-bit product of a and b folded to 64 bits.
func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// le64 and le32 read the first 8 and 4 bytes of s, little-endian (one
// load each: the compiler merges the byte reads).
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// hashStored returns the hash of an entry's stored key (its Scope's prefix
// and its key).
func (t *Table) hashStored(stored string) uint64 {
	id, n := uvarint(stored)
	sc := Scope{mix: mixOf(id)}
	return t.Hash(&sc, stored[n:])
}

// ShardOf picks the shard from the high bits of h; slots use the low bits.
func (t *Table) ShardOf(h uint64) *Shard { return &t.shards[(h>>40)&t.mask] }

// Find returns the entry for key of Scope sc in sh, or nil.
func (t *Table) Find(sh *Shard, sc *Scope, key string, h uint64) *Entry {
	slots := *sh.slots.Load()
	if len(slots) == 0 {
		return nil
	}
	m := uint64(len(slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		e := slots[i].Load()
		if e == nil || sc.Holds(e.key, key) {
			return e
		}
	}
}

// Load returns the shard of key of Scope sc, its hash and its entry, or
// nil.
func (t *Table) Load(sc *Scope, key string) (*Shard, uint64, *Entry) {
	h := t.Hash(sc, key)
	sh := t.ShardOf(h)
	return sh, h, t.Find(sh, sc, key, h)
}

// put places e in slots, which has room. The caller holds sh.mu.
func (t *Table) put(slots []atomic.Pointer[Entry], e *Entry, h uint64) {
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
func (t *Table) rebuild(sh *Shard, extra int, keep func(*Entry) bool) {
	old := *sh.slots.Load()
	live := make([]*Entry, 0, sh.n)
	for i := range old {
		if e := old[i].Load(); e != nil && keep(e) {
			live = append(live, e)
		}
	}
	size := 8
	for (len(live)+extra)*8 > size*7 {
		size *= 2
	}
	slots := make([]atomic.Pointer[Entry], size)
	for _, e := range live {
		t.put(slots, e, t.hashStored(e.key))
	}
	sh.n = len(live)
	sh.slots.Store(&slots)
}

// Reclaimer is what sweeping a table needs from its entries. Its methods
// get each entry as the table holds it, its Entry field.
type Reclaimer interface {
	// Kill marks e dead, so that no step uses it again, if it is restored
	// at now or if force is set; it reports whether it did. A busy entry may
	// be skipped.
	Kill(e *Entry, now int64, force bool) bool
	// Held returns what e remembers (the units it counts; 0 for a bucket,
	// whose debt is in restoreAt) and the instant at which it carries no
	// information, or false for an entry that is dead or busy.
	Held(e *Entry) (held, restoreAt int64, ok bool)
}

// evictSample is the number of entries an eviction compares.
const evictSample = 8

// Insert adds a fresh entry for key of Scope sc unless one exists, and
// returns the entry now in the table; init, if not nil, prepares a fresh
// entry before anyone can see it. Before adding, it reclaims the entries of
// the shard restored for longer than the table's grace (SetGrace) when the
// shard has doubled since its last sweep, and evicts one entry when the
// table holds maxKeys entries.
func (t *Table) Insert(sh *Shard, sc *Scope, key string, h uint64, r Reclaimer, now func() int64, maxKeys int64, init ...func(*Entry)) *Entry {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := t.Find(sh, sc, key, h); e != nil {
		return e
	}
	// Count the new entry before checking the cap, so that concurrent
	// insertions into other shards see it and evict for it.
	total := t.count.Add(1)
	removed := 0
	if sh.n >= sh.sweepAt {
		removed += t.sweepLocked(sh, r, before(now(), t.grace), false)
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
		t.rebuild(sh, 1, func(*Entry) bool { return true })
	}
	// A new string: the caller's key may share memory with a larger buffer
	// that the table must not keep alive.
	e := t.newE()
	e.key = sc.prefix + key
	for _, f := range init {
		f(e)
	}
	t.put(*sh.slots.Load(), e, h)
	sh.n++
	return e
}

// before returns now less grace, saturated at math.MinInt64 (before
// which nothing is restored).
func before(now, grace int64) int64 {
	if now < math.MinInt64+grace {
		return math.MinInt64
	}
	return now - grace
}

// sweepLocked deletes the restored entries of sh (with force, every entry
// kill accepts) and returns how many. The caller holds sh.mu for writing.
func (t *Table) sweepLocked(sh *Shard, r Reclaimer, now int64, force bool) int {
	before := sh.n
	t.rebuild(sh, 0, func(e *Entry) bool { return !r.Kill(e, now, force) })
	return before - sh.n
}

// evictLocked deletes, among a few entries of sh, the one that remembers
// the least: the fewest units counted, then the soonest restored. A spent
// quota is never forgotten while a sampled entry holds less, so a
// key-rotation attack (a stream of new keys, each used once) evicts its own
// keys before the keys it spent. It returns 1 if it deleted one. The caller
// holds sh.mu for writing.
func (t *Table) evictLocked(sh *Shard, r Reclaimer, now int64) int {
	if sh.n == 0 {
		return 0
	}
	var (
		victim           *Entry
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
		held, when, ok := r.Held(e)
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
	if victim == nil || !r.Kill(victim, now, true) {
		return 0
	}
	t.deleteAt(sh, at)
	return 1
}

// evictElsewhere evicts from the first other shard whose lock is free and
// that has an entry to evict, for a full table whose inserting shard is
// empty. The caller holds sh.mu; TryLock keeps shard locks free of cycles.
func (t *Table) evictElsewhere(sh *Shard, r Reclaimer, now int64) int {
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
func (t *Table) deleteAt(sh *Shard, i uint64) {
	slots := *sh.slots.Load()
	m := uint64(len(slots) - 1)
	for j := (i + 1) & m; slots[j].Load() != nil; j = (j + 1) & m {
		e := slots[j].Load()
		home := t.hashStored(e.key) & m
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

// SweepAll deletes the restored entries of every shard.
func (t *Table) SweepAll(r Reclaimer, now int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		t.count.Add(int64(-t.sweepLocked(sh, r, now, false)))
		sh.sweepAt = max(2*sh.n, minSweep)
		sh.mu.Unlock()
	}
}

// Len returns the number of entries.
func (t *Table) Len() int { return int(t.count.Load()) }

// Scope keeps the keys of one limiter name apart from the others' in the
// tables of a store: prefix is the uvarint of the name's number, which
// starts every key stored for it, and mix is what the number changes in
// the hashes of its keys.
type Scope struct {
	prefix string
	mix    uint64
	first  byte // prefix[0]
	short  bool // len(prefix) == 1
}

// NewScope returns the scope numbered id.
func NewScope(id uint64) Scope {
	var b [10]byte
	n := 0
	for v := id; ; v >>= 7 {
		if v < 0x80 {
			b[n] = byte(v)
			n++
			break
		}
		b[n] = byte(v) | 0x80
		n++
	}
	return Scope{prefix: string(b[:n]), mix: mixOf(id), first: b[0], short: n == 1}
}

// mixOf spreads a Scope's number over the bits of a hash: 2^64 over the
// golden ratio, times the number.
func mixOf(id uint64) uint64 { return id * 0x9E3779B97F4A7C15 }

// Holds reports whether stored, an entry's stored key, is key in Scope sc.
//
// The first byte of the prefix (all of it for the first 127 scopes) is
// compared as a byte, not as a string: a string comparison is a call,
// and it cost a decision a third of its lookup (callgrind).
func (sc *Scope) Holds(stored, key string) bool {
	if len(stored) != len(key)+1 || !sc.short {
		return sc.holdsLong(stored, key)
	}
	return stored[0] == sc.first && stored[1:] == key
}

func (sc *Scope) holdsLong(stored, key string) bool {
	n := len(sc.prefix)
	return len(stored) == n+len(key) && stored[:n] == sc.prefix && stored[n:] == key
}

// uvarint decodes the Scope number at the start of a stored key and
// returns it with its length in bytes. A prefix is a uvarint, so no
// prefix is the start of another.
func uvarint(s string) (uint64, int) {
	var v uint64
	for i := 0; i < len(s) && i < 10; i++ {
		c := s[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return v, len(s)
}
