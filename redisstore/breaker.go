package redisstore

import (
	"fmt"
	"sync"
	"time"
)

// BreakerState is the state of the Store's circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed sends every decision to Redis.
	BreakerClosed BreakerState = iota
	// BreakerOpen sends none: decisions fail at once with ErrBreakerOpen and
	// go to the failure policy, until Options.BreakerCooldown has passed.
	BreakerOpen
	// BreakerHalfOpen sends one decision at a time to Redis as a probe; the
	// others fail as when open. A successful probe closes the breaker, a
	// failed one opens it again.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// breaker is a consecutive-failure circuit breaker. It is safe for
// concurrent use. It reports its state changes to the caller instead of
// calling anyone, so that observers run outside its lock (gobreaker calls
// OnStateChange with its mutex held, which is why floodgate does not use
// it).
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	state    BreakerState
	failures int       // consecutive failures while closed
	until    time.Time // end of the open period
	probing  bool      // a half-open probe is in flight
}

// change is a state change to report, or none when from == to.
type change struct{ from, to BreakerState }

func (c change) none() bool { return c.from == c.to }

// outcome is how a call that allow let through ended.
type outcome uint8

const (
	succeeded outcome = iota // Redis answered
	failed                   // Redis failed or was too slow
	ignored                  // the caller gave up; says nothing of Redis
)

// allow reports whether a call may go to Redis now, and whether it is the
// half-open probe (which the caller must pass back to done).
func (b *breaker) allow(now time.Time) (ok, probe bool, c change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, false, c
	case BreakerOpen:
		if now.Before(b.until) {
			return false, false, c
		}
		c = change{b.state, BreakerHalfOpen}
		b.state = BreakerHalfOpen
	}
	if b.probing {
		return false, false, c
	}
	b.probing = true
	return true, true, c
}

// done records the outcome of a call allow let through.
func (b *breaker) done(now time.Time, probe bool, o outcome) change {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.state
	if probe {
		b.probing = false
		switch o {
		case succeeded:
			b.state, b.failures = BreakerClosed, 0
		case failed:
			b.state, b.until = BreakerOpen, now.Add(b.cooldown)
		}
		return change{from, b.state}
	}
	if b.state != BreakerClosed {
		// A call let through before the breaker opened: its outcome is
		// already accounted for by the failures that opened it.
		return change{from, from}
	}
	switch o {
	case succeeded:
		b.failures = 0
	case failed:
		b.failures++
		if b.failures >= b.threshold {
			b.state, b.until, b.failures = BreakerOpen, now.Add(b.cooldown), 0
		}
	}
	return change{from, b.state}
}

// current returns the state, for tests and Store.BreakerState.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
