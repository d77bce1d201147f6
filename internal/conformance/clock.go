// Package conformance is the test suite every floodgate.Store must pass: the
// same cases and randomized traces, checked against the algorithms'
// reference Steps and against naive models, for every store (the pattern of
// testing/slogtest).
package conformance

import (
	"sync"
	"time"
)

// Clock is a virtual clock for tests. It is safe for concurrent use; the
// zero value reads as the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
