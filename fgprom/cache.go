package fgprom

import (
	"maps"
	"sync"
	"sync/atomic"
)

// children maps a tuple of label values to the metric children it
// resolves to. It is copy-on-write: a lookup of a tuple already seen is
// one atomic load and one map lookup, without a lock and without an
// allocation; the first event of a new tuple copies the map under mu.
//
// The tuples are few (component names, outcomes, node addresses: never
// keys), so the copies cost little and happen only while a process
// warms up. client_golang's Vec.WithLabelValues would resolve the same
// children, but hashes the values and takes a read lock on every call.
type children[K comparable, V any] struct {
	m    atomic.Pointer[map[K]V]
	mu   sync.Mutex
	make func(K) V // resolves a new tuple; called under mu
}

// get returns the children of k, resolving them the first time.
func (c *children[K, V]) get(k K) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	return c.add(k)
}

// add resolves k's children and publishes a copy of the map with them.
// make calls client_golang only, never user code, so holding mu is safe.
func (c *children[K, V]) add(k K) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next map[K]V
	if old := c.m.Load(); old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
		next = make(map[K]V, len(*old)+1)
		maps.Copy(next, *old)
	} else {
		next = make(map[K]V, 1)
	}
	v := c.make(k)
	next[k] = v
	c.m.Store(&next)
	return v
}
