package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/observe"
)

// BreakerState is the state of a circuit breaker: each node of a Store has
// one. It is observe.BreakerState, which Options.Observer's OnBreaker
// receives.
type BreakerState = observe.BreakerState

// The states of a node's breaker.
const (
	// BreakerClosed sends every decision to Redis.
	BreakerClosed = observe.BreakerClosed
	// BreakerOpen sends none: decisions fail at once with ErrBreakerOpen and
	// go to the failure policy, until Options.BreakerCooldown has passed.
	// It opens when, over the last second or so, at least
	// Options.BreakerThreshold calls failed and they were at least half of
	// the calls.
	BreakerOpen = observe.BreakerOpen
	// BreakerHalfOpen sends one decision at a time to Redis as a probe; the
	// others fail as when open. A successful probe closes the breaker, a
	// failed one opens it again.
	BreakerHalfOpen = observe.BreakerHalfOpen
)

// breaker is a circuit breaker that opens when, over the last second or
// so, at least threshold calls failed and they were at least half of the
// calls. A ratio rather than a run of consecutive failures: a hiccup of the
// process (a GC pause, a descheduled thread) fails every call in flight at
// once, which says little about Redis when thousands of calls succeed
// around it. It is safe for concurrent use. It reports its state changes
// to the caller instead of calling anyone, so that observers run outside
// its lock (gobreaker calls OnStateChange with its mutex held, which is
// why floodgate does not use it).
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu      sync.Mutex
	state   BreakerState
	cur     tally     // calls in the current half-second bucket
	prev    tally     // and in the one before
	bucket  time.Time // start of the current bucket
	until   time.Time // end of the open period
	probing bool      // a half-open probe is in flight
}

// tally counts the calls that ended in a bucket.
type tally struct{ calls, failures int }

// bucketLen is the length of a bucket: the breaker looks at the last one
// to two of them.
const bucketLen = 500 * time.Millisecond

// roll moves the buckets forward to now.
func (b *breaker) roll(now time.Time) {
	switch d := now.Sub(b.bucket); {
	case d < bucketLen:
		return
	case d < 2*bucketLen:
		b.prev = b.cur
	default:
		b.prev = tally{}
	}
	b.cur, b.bucket = tally{}, now
}

// change is a state change to report, or none when from == to.
type change struct{ from, to BreakerState }

func (c change) none() bool { return c.from == c.to }

// outcome is how a call that allow let through ended.
type outcome uint8

const (
	succeeded outcome = iota // Redis answered
	failed                   // Redis failed
	timedOut                 // Redis was too slow
	refused                  // the node answered, refusing the command
	busy                     // waited too long for a slot while the node answered others
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
	if probe && o == timedOut {
		// The probe waited its whole deadline (the cooldown): the node
		// still stalls, and the cooldown has passed meanwhile. The next
		// decision sends the next probe, so that one PING is always out
		// and the stall's end is seen within a round trip of it.
		b.probing = false
		b.state, b.until = BreakerOpen, now
		return change{from, b.state}
	}
	switch o {
	case timedOut:
		o = failed
	case refused:
		o = succeeded
	case busy:
		o = ignored
	}
	if probe {
		b.probing = false
		switch o {
		case succeeded:
			b.state = BreakerClosed
			b.cur, b.prev, b.bucket = tally{}, tally{}, now
		case failed:
			b.state, b.until = BreakerOpen, now.Add(b.cooldown)
		}
		return change{from, b.state}
	}
	if b.state != BreakerClosed || o == ignored {
		// A call let through before the breaker opened is accounted for
		// by the failures that opened it; a caller who gave up says
		// nothing of Redis.
		return change{from, from}
	}
	b.roll(now)
	b.cur.calls++
	if o == failed {
		b.cur.failures++
		calls, failures := b.cur.calls+b.prev.calls, b.cur.failures+b.prev.failures
		if failures >= b.threshold && 2*failures >= calls {
			b.state, b.until = BreakerOpen, now.Add(b.cooldown)
			b.cur, b.prev = tally{}, tally{}
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

// probe sends the half-open breaker of n its probe: a PING, on a goroutine
// of its own, with a deadline of its own (BreakerCooldown, or Timeout if
// longer) rather than a decision's. A decision's timeout measures the
// wait of a caller; a probe measures whether the node answers. Callers
// that retry a failed decision at once keep a small host's CPUs busy, and
// a probe that had to answer within a decision's 20ms, behind them in the
// run queue, failed though Redis was back, and the breaker stayed open
// for as long as they spun. The decision that found the breaker half-open
// fails as when it is open; the probe's outcome closes the breaker or
// opens it for another cooldown. Close cancels a probe in flight.
func (s *Store) probe(n *node) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		n.breaker.done(s.wall(), true, ignored)
		return
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	go func() {
		defer s.inflight.Done()
		timeout := s.cooldown
		if s.timeout != NoTimeout {
			timeout = max(timeout, s.timeout)
		}
		ctx, cancel := context.WithTimeout(s.life, timeout)
		defer cancel()
		t := s.trip(context.Background(), n, 0)
		start := time.Since(mono)
		err := s.pingNode(ctx, n)
		if t.s != nil {
			t.report(time.Since(mono)-start, err)
		}
		o := succeeded
		switch {
		case s.life.Err() != nil:
			o = ignored
		case err != nil:
			// classify with no caller: a timeout is the node's.
			o, _ = classify(context.Background(), err)
		}
		c := n.breaker.done(s.wall(), true, o)
		if o == succeeded {
			n.answered(nil)
			n.owed.Store(false)
			s.kickCleanup(n)
		}
		s.report(context.Background(), n, c)
	}()
}

// pingNode sends n a PING within ctx's deadline, on a goroutine of its own
// when the client would not stop at it.
func (s *Store) pingNode(ctx context.Context, n *node) error {
	var c redis.UniversalClient = s.client
	if nc := n.client.Load(); nc != nil {
		c = nc
	}
	if !s.guard {
		return c.Ping(ctx).Err()
	}
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx).Err() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
