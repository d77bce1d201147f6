package lease

// Keys returns the number of keys the Limiter tracks.
func (l *Limiter) Keys() int { return l.entries.Size() }

// Held returns the units in key's pool, usable or not.
func (l *Limiter) Held(key string) int64 {
	e, ok := l.entries.Load(key)
	if !ok {
		return 0
	}
	if p := e.pool.Load(); p != nil {
		return p.left.Load()
	}
	return 0
}

// Batch returns key's current batch size.
func (l *Limiter) Batch(key string) int64 {
	e, ok := l.entries.Load(key)
	if !ok {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.batch
}
