package inflight

import (
	"context"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keytable"
)

// LocalStore is the in-process Store: per key, the number of requests in
// flight in one word updated with compare-and-swap, and a pooled holder
// per request whose generation makes a second Release of its Hold do
// nothing. Acquire and Release take no lock and allocate nothing for a key
// in use. The holds never expire (their holders live in this process), so
// they need no renewal. A key without requests in flight is idle and is
// reclaimed as the table grows; a key with some is never forgotten, since
// forgetting it would admit more than its limit, so the keys it holds are
// bounded by the requests in flight, not by the keys clients invent.
//
// The holds of a key belong to the key under one limiter name: the keys of
// each name are kept apart in the one table by a prefix of the name's
// number (as memstore keeps the names of its limiters apart), so that
// limiters of different names never share a key's holds. A name is
// numbered by the first Acquire that uses it and remembered for the life
// of the store, at the cost of the name and about 100 bytes: the names are
// those of the limiters built on the store, not the keys of clients.
//
// Its table has 64 shards per processor (GOMAXPROCS when it is made), at
// most 4096, of about 90 bytes each: 12 KB on 2 processors, 360 KB from
// 64 (measured with runtime.MemStats), as memstore's in-flight table had.
//
// It is safe for concurrent use. Create one with NewLocalStore; the zero
// value is not usable.
type LocalStore struct {
	t       *keytable.Table // of localEntry
	holders sync.Pool       // of *holder

	// scopes are the names the store has seen, copied on write: an
	// Acquire reads them without a lock, and only a new name takes mu.
	scopes atomic.Pointer[scopeSet]
	mu     sync.Mutex // serializes the additions to scopes
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore.
func NewLocalStore() *LocalStore {
	s := &LocalStore{}
	s.t = keytable.New(localShards(), func() *keytable.Entry { return &new(localEntry).Entry })
	s.holders.New = func() any { return &holder{pool: &s.holders} }
	s.scopes.Store(&scopeSet{})
	return s
}

// localShards is the number of shards of a LocalStore's table: 64 per
// processor, at most 4096, as a power of two, as memstore's tables have
// (memstore held the in-flight holds before LocalStore). A shard sweeps
// its idle keys once it holds 64 entries, and an in-flight key is idle
// between its requests, so with few shards the keys of a modest working
// set were reclaimed and added again on every request, two allocations
// each: 1024 keys in rotation on 8 shards (4 per processor, 2 processors)
// cost 2 allocations and 3.5 times the time of an Acquire and Release
// (measured; see BenchmarkLimiterAcquire). A shard costs about 90 bytes.
func localShards() int {
	n := 1
	for n < 64*runtime.GOMAXPROCS(0) && n < 4096 {
		n *= 2
	}
	return n
}

// scopeSet is the names a LocalStore has seen and their scopes. It is
// never modified once published: a new name publishes a copy.
type scopeSet struct {
	// list holds the first maxListed names, searched in order on every
	// Acquire: a few string comparisons cost less than hashing the name
	// for a map, and the Limiter passes the same string every time, which
	// compares equal without its bytes being read.
	list []namedScope
	// byName holds every name once there are more than maxListed, and is
	// nil until then.
	byName map[string]*keytable.Scope
}

// namedScope is a name and its scope.
type namedScope struct {
	name string
	sc   keytable.Scope
}

// maxListed is the most names a scopeSet searches in a list.
const maxListed = 8

// listed returns the scope of name if name is in the list of scopes, or
// nil. It takes no lock, allocates nothing and is small enough to inline
// into Acquire.
func (s *LocalStore) listed(name string) *keytable.Scope {
	set := s.scopes.Load()
	for i := range set.list {
		if set.list[i].name == name {
			return &set.list[i].sc
		}
	}
	return nil
}

// scope returns the scope of name's keys when listed has not found it:
// from the map of names, or a new one.
func (s *LocalStore) scope(name string) (*keytable.Scope, error) {
	if sc := s.scopes.Load().byName[name]; sc != nil {
		return sc, nil
	}
	return s.addScope(name)
}

// addScope numbers name, unless another call did since listed looked, and
// publishes the names with it: name is checked (floodgate.CheckName) and
// numbered under mu. Numbers are never reused, and start at 1, as
// memstore's do.
func (s *LocalStore) addScope(name string) (*keytable.Scope, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, fmt.Errorf("inflight: LocalStore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.scopes.Load()
	for i := range old.list {
		if old.list[i].name == name {
			return &old.list[i].sc, nil
		}
	}
	if sc := old.byName[name]; sc != nil {
		return sc, nil
	}
	n := max(len(old.list), len(old.byName))
	// The caller's string itself, not a copy: a Limiter passes the same
	// string on every call, and strings of one address compare equal
	// without their bytes being read (a copy cost a denial 1ns of its
	// 16ns, measured). A name is short and lives as long as its Limiter.
	ns := &namedScope{name: name, sc: keytable.NewScope(uint64(n) + 1)}
	set := &scopeSet{list: old.list}
	if n < maxListed {
		set.list = append(slices.Clip(old.list), *ns)
		ns = &set.list[n]
	} else {
		// The first names stay listed; the map holds them all.
		set.byName = make(map[string]*keytable.Scope, n+1)
		for i := range old.list {
			set.byName[old.list[i].name] = &old.list[i].sc
		}
		maps.Copy(set.byName, old.byName)
		set.byName[name] = &ns.sc
	}
	s.scopes.Store(set)
	return &ns.sc, nil
}

// dead marks an entry that a sweep removed from the table. An Acquire that
// loads it looks the key up again.
const dead = math.MinInt64

// localEntry is the number of holds of a key, or dead once reclaimed.
type localEntry struct {
	keytable.Entry // first: see asLocal
	n              atomic.Int64
}

// asLocal returns the localEntry that e heads, or nil for nil; e comes
// from a LocalStore's table. The table holds its entries as their
// keytable.Entry, their first field, and the conversion back with
// unsafe.Pointer is valid: e points to the start of a localEntry (see
// keytable.Entry, and memstore's asWord for why the table is not generic).
func asLocal(e *keytable.Entry) *localEntry { return (*localEntry)(unsafe.Pointer(e)) }

func _() {
	// An "invalid argument: index out of bounds" error here means
	// localEntry's keytable.Entry is no longer its first field.
	var x [1]struct{}
	_ = x[unsafe.Offsetof(localEntry{}.Entry)]
}

// holder is one hold. A Hold is a (holder, generation) pair: Release
// advances the generation and returns the holder to the pool, so that the
// first Release of any copy of a Hold frees the slot and every later one,
// finding a newer generation, does nothing, however often the holder has
// been reused since. Generations only grow, so a stale Hold never matches
// again.
//
// e and pool are plain fields: only the Acquire that took the holder from
// the pool writes them, and only the Release that wins the generation
// reads e, and sync.Pool orders a Put before the Get that returns the same
// holder. A stale Release reads gen alone. (Atomic pointers cost a
// quarter of an Acquire and Release, measured.)
type holder struct {
	gen  atomic.Uint64
	e    *localEntry // the key's entry while held
	pool *sync.Pool  // the pool the holder returns to
}

// entry returns the entry of key in scope sc, adding one if needed. It
// compares keys in place, as memstore's lookups do, on the hot path of
// every Acquire.
func (s *LocalStore) entry(sc *keytable.Scope, key string) *localEntry {
	h := s.t.Hash(sc, key)
	sh := s.t.ShardOf(h)
	slots := sh.Slots()
	if len(slots) > 0 {
		m := uint64(len(slots) - 1)
		for i := h & m; ; i = (i + 1) & m {
			e := slots[i].Load()
			if e == nil {
				break
			}
			if sc.Holds(e.Key(), key) {
				return asLocal(e)
			}
		}
	}
	return asLocal(s.t.Insert(sh, sc, key, h, localReclaimer{}, zeroNow, math.MaxInt64))
}

// zeroNow is the clock of the table's sweeps: the reclaimer ignores it.
func zeroNow() int64 { return 0 }

// Len returns the number of keys the store tracks, of every name: those
// with requests in flight and idle ones not yet reclaimed.
func (s *LocalStore) Len() int { return s.t.Len() }

// Sweep reclaims the entries of every key without requests in flight.
func (s *LocalStore) Sweep() { s.t.SweepAll(localReclaimer{}, 0) }

// localReclaimer reclaims the entries of keys with no request in flight,
// which carry no information. An entry with holds is never reclaimed nor
// evicted, not even when MaxKeys is reached: forgetting it would admit more
// than the limit while its requests run. Such entries are bounded by the
// requests in flight in the process, not by the keys a client can invent.
type localReclaimer struct{}

func (localReclaimer) Kill(e *keytable.Entry, _ int64, _ bool) bool {
	// Fails if an Acquire took a slot since the load: the entry is in use.
	return asLocal(e).n.CompareAndSwap(0, dead)
}

// Held offers only idle entries to eviction: one with holds is busy, as
// kill would refuse it.
func (localReclaimer) Held(e *keytable.Entry) (held, restoreAt int64, ok bool) {
	if asLocal(e).n.Load() != 0 {
		return 0, 0, false
	}
	return 0, math.MinInt64, true
}

// Acquire takes one of limit slots of key under name; see Store. The
// count is exact and the hold never expires (its holder lives in this
// process), so ttl is ignored; ctx too, since Acquire does no I/O. For a
// key in use it takes no lock and allocates nothing. A name the store has
// not seen is checked with floodgate.CheckName.
func (s *LocalStore) Acquire(_ context.Context, name, key string, limit int64, _ time.Duration) (Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		// CheckKey's test inline: CheckKey is a call on every Acquire.
		return Result{}, floodgate.CheckKey(key)
	}
	if limit < 1 {
		return Result{}, fmt.Errorf("%w: inflight: limit must be at least 1, got %d", floodgate.ErrInvalidConfig, limit)
	}
	sc := s.listed(name)
	if sc == nil {
		var err error
		if sc, err = s.scope(name); err != nil {
			return Result{}, err
		}
	}
	e := s.entry(sc, key)
	for {
		n := e.n.Load()
		switch {
		case n == dead:
			// Reclaimed after we found it: look again.
			e = s.entry(sc, key)
			continue
		case n >= limit:
			return Result{InFlight: n}, nil
		}
		if e.n.CompareAndSwap(n, n+1) {
			h := s.holders.Get().(*holder)
			h.e = e
			return Result{Allowed: true, InFlight: n + 1, Hold: Hold{ID: h.gen.Load(), Ref: h}}, nil
		}
	}
}

// Renew reports whether h is still held; see Store. A LocalStore's
// holds never expire, so there is nothing to extend. The Hold names its
// slot, so name and key are not read.
func (s *LocalStore) Renew(_ context.Context, _, _ string, h Hold, _ time.Duration) (bool, error) {
	hd, err := s.holderOf(h)
	if err != nil || hd == nil {
		return false, err
	}
	return hd.gen.Load() == h.ID, nil
}

// Release frees the slot of h, once; see Store. It allocates
// nothing. The Hold names its slot (its holder points at the entry of its
// name and key), so name and key are not read.
func (s *LocalStore) Release(_ context.Context, _, _ string, h Hold) error {
	hd, err := s.holderOf(h)
	if err != nil || hd == nil {
		return err
	}
	if !hd.gen.CompareAndSwap(h.ID, h.ID+1) {
		return nil // released before
	}
	// Only the winner of the generation gets here, once per Acquire, so
	// the count stays exact and the entry, holding at least this slot,
	// cannot have been reclaimed.
	hd.e.n.Add(-1)
	// The holder keeps its entry until it is reused: clearing it would
	// cost a store per Release, and the pool drops idle holders at the
	// second GC.
	hd.pool.Put(hd)
	return nil
}

// holderOf returns the holder of h: nil for the zero Hold, an error
// matching ErrInvalidHold for a Hold of another kind of store.
func (s *LocalStore) holderOf(h Hold) (*holder, error) {
	if h.Ref == nil {
		return nil, nil
	}
	hd, ok := h.Ref.(*holder)
	if !ok || hd == nil {
		return nil, fmt.Errorf("%w: inflight: LocalStore got a %T", ErrInvalidHold, h.Ref)
	}
	return hd, nil
}
