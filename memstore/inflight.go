package memstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/step"
)

// The Store is also an inflight.Store: the holds of the requests in flight
// per key, in a table of their own beside the algorithms'.
var _ inflight.Store = (*Store)(nil)

// inflightEntry is the number of holds of a key, or dead once reclaimed.
type inflightEntry struct {
	n   atomic.Int64
	key string
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
	e    *inflightEntry // the key's entry while held
	pool *sync.Pool     // the pool the holder returns to
}

// inflightTable holds the in-flight counts of keys.
type inflightTable struct {
	*table[inflightEntry]
	s       *Store
	holders sync.Pool // of *holder
}

func newInflightTable(s *Store) *inflightTable {
	t := &inflightTable{
		table: newTable(s.shards,
			func(e *inflightEntry) string { return e.key },
			func(key string) *inflightEntry { return &inflightEntry{key: key} }),
		s: s,
	}
	t.holders.New = func() any { return &holder{pool: &t.holders} }
	return t
}

// entry returns key's entry, adding one if needed. It compares keys in
// place, as wordTable.lookup does, on the hot path of every Acquire.
func (t *inflightTable) entry(key string) *inflightEntry {
	h := t.hash(key)
	sh := t.shardOf(h)
	slots := *sh.slots.Load()
	if len(slots) > 0 {
		m := uint64(len(slots) - 1)
		for i := h & m; ; i = (i + 1) & m {
			e := slots[i].Load()
			if e == nil {
				break
			}
			if e.key == key {
				return e
			}
		}
	}
	return t.insert(sh, key, h, inflightReclaimer{}, t.s.nowNs, t.s.maxKeys)
}

func (t *inflightTable) sweep(now int64) { t.sweepAll(inflightReclaimer{}, now) }
func (t *inflightTable) len() int        { return t.size() }

// inflightReclaimer reclaims the entries of keys with no request in flight,
// which carry no information. An entry with holds is never reclaimed nor
// evicted, not even when MaxKeys is reached: forgetting it would admit more
// than the limit while its requests run. Such entries are bounded by the
// requests in flight in the process, not by the keys a client can invent.
type inflightReclaimer struct{}

func (inflightReclaimer) kill(e *inflightEntry, _ int64, _ bool) bool {
	// Fails if an Acquire took a slot since the load: the entry is in use.
	return e.n.CompareAndSwap(0, dead)
}

// held offers only idle entries to eviction: one with holds is busy, as
// kill would refuse it.
func (inflightReclaimer) held(e *inflightEntry) (held, restoreAt int64, ok bool) {
	if e.n.Load() != 0 {
		return 0, 0, false
	}
	return 0, math.MinInt64, true
}

// Acquire takes one of limit slots of key; see inflight.Store. The count
// is exact and the hold never expires (its holder lives in this process),
// so ttl is ignored; ctx too, since Acquire does no I/O. For a key in use
// it takes no lock and allocates nothing.
func (s *Store) Acquire(_ context.Context, key string, limit int64, _ time.Duration) (inflight.Result, error) {
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return inflight.Result{}, step.CheckKey(key)
	}
	if limit < 1 {
		return inflight.Result{}, fmt.Errorf("%w: memstore: in-flight limit must be at least 1, got %d", floodgate.ErrInvalidConfig, limit)
	}
	t := lazy(s, &s.inf, func() *inflightTable { return newInflightTable(s) })
	e := t.entry(key)
	for {
		n := e.n.Load()
		switch {
		case n == dead:
			// Reclaimed after we found it: look again (see tbBound.Apply).
			e = t.entry(key)
			continue
		case n >= limit:
			return inflight.Result{InFlight: n}, nil
		}
		if e.n.CompareAndSwap(n, n+1) {
			h := t.holders.Get().(*holder)
			h.e = e
			return inflight.Result{Allowed: true, InFlight: n + 1, Hold: inflight.Hold{ID: h.gen.Load(), Ref: h}}, nil
		}
	}
}

// Renew reports whether h is still held; see inflight.Store. memstore's
// holds never expire, so there is nothing to extend.
func (s *Store) Renew(_ context.Context, _ string, h inflight.Hold, _ time.Duration) (bool, error) {
	hd, err := s.holderOf(h)
	if err != nil || hd == nil {
		return false, err
	}
	return hd.gen.Load() == h.ID, nil
}

// Release frees the slot of h, once; see inflight.Store. It allocates
// nothing.
func (s *Store) Release(_ context.Context, _ string, h inflight.Hold) error {
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
// matching inflight.ErrInvalidHold for a Hold of another kind of store.
func (s *Store) holderOf(h inflight.Hold) (*holder, error) {
	if h.Ref == nil {
		return nil, nil
	}
	hd, ok := h.Ref.(*holder)
	if !ok || hd == nil {
		return nil, fmt.Errorf("%w: memstore got a %T", inflight.ErrInvalidHold, h.Ref)
	}
	return hd, nil
}
