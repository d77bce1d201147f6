package lease

// Keys returns the number of keys the Store tracks, over its bindings.
func (s *Store) Keys() int {
	n := 0
	for _, b := range s.bound() {
		n += b.entries.Size()
	}
	return n
}

// Held returns the units in key's pools, usable or not, over the Store's
// bindings.
func (s *Store) Held(key string) int64 {
	n := int64(0)
	for _, b := range s.bound() {
		n += b.held(key)
	}
	return n
}

// HeldBy returns the units in key's pool of the binding of the limiter
// named name (of any algorithm).
func (s *Store) HeldBy(name, key string) int64 {
	n := int64(0)
	for _, b := range s.bound() {
		if b.name == name {
			n += b.held(key)
		}
	}
	return n
}

// Batch returns key's current batch size: the largest over the Store's
// bindings.
func (s *Store) Batch(key string) int64 { return s.most(key, func(e *entry) int64 { return e.batch }) }

// most returns the largest of f over key's entries, each read under its
// lock.
func (s *Store) most(key string, f func(*entry) int64) int64 {
	n := int64(0)
	for _, b := range s.bound() {
		e, ok := b.entries.Load(key)
		if !ok {
			continue
		}
		e.mu.Lock()
		n = max(n, f(e))
		e.mu.Unlock()
	}
	return n
}

// held returns the units in key's pool, usable or not.
func (l *binding) held(key string) int64 {
	e, ok := l.entries.Load(key)
	if !ok {
		return 0
	}
	if p := e.pool.Load(); p != nil {
		return p.left.Load()
	}
	return 0
}

// FleetShare is fleetShare, for tests.
var FleetShare = fleetShare

// Share returns the most units the Store may hold for key by its Fleet
// share (0 before one): the largest over its bindings.
func (s *Store) Share(key string) int64 { return s.most(key, func(e *entry) int64 { return e.share }) }

// Records returns the number of keys a MemFleet holds records for.
func (f *MemFleet) Records() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.records)
}
