package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// call runs the script of kind on rkey. Options.Timeout starts once the
// call goes to Redis: after a free slot among MaxInFlight, or in the
// batch's pipeline; the wait before is bounded by ctx alone.
// It also reports whether the call was one of the store's first, cold ones.
func (s *Store) call(ctx context.Context, kind floodgate.Kind, rkey string, args []any) (reply any, err error, cold bool) {
	if s.batch != nil {
		return s.batch.do(ctx, kind, rkey, args)
	}
	select {
	case s.gate <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err(), false
	}
	timeout := s.timeout
	if s.started.Load() < s.cold && s.started.Add(1) <= s.cold {
		cold, timeout = true, max(timeout, coldTimeout)
	}
	script := programs[kind]
	if timeout == NoTimeout {
		// The caller's context and go-redis' timeouts bound the call: no
		// context of our own, and no goroutine to stop waiting early.
		defer func() { <-s.gate }()
		reply, err = script.Run(ctx, s.client, []string{rkey}, args...).Result()
		return reply, err, cold
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !s.guard {
		defer func() { <-s.gate }()
		reply, err = script.Run(ctx, s.client, []string{rkey}, args...).Result()
		return reply, err, cold
	}
	// The client would not stop at ctx's deadline: run the call on its own
	// goroutine and stop waiting at the deadline. The goroutine keeps its
	// slot (and its connection) until go-redis gives up (its read, write
	// and pool timeouts); Close waits for it.
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		<-s.gate
		return nil, unavailable(ErrClosed, nil), cold
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer s.inflight.Done()
		defer func() { <-s.gate }()
		v, err := script.Run(ctx, s.client, []string{rkey}, args...).Result()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err, cold
	case <-ctx.Done():
		return nil, ctx.Err(), cold
	}
}

// classify says what a call's error tells of Redis, and returns the error
// to report: nil, the caller's context error, or an error matching
// floodgate.ErrUnavailable.
func classify(ctx context.Context, err error) (outcome, error) {
	if err == nil {
		return succeeded, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller gave up; that says nothing of Redis.
		return ignored, cerr
	}
	if errors.Is(err, ErrClosed) {
		return ignored, err
	}
	if errors.Is(err, ErrReply) {
		// A batch's reply of the wrong form: Redis answered.
		return succeeded, err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
			// The caller's deadline passed (a socket deadline may fire
			// before the context's timer does): the caller gave up.
			return ignored, context.DeadlineExceeded
		}
		return timedOut, unavailable(ErrTimeout, err)
	}
	if isDataError(err) {
		// Redis answered; the same call would fail again, so this is not
		// a failure of Redis for the breaker or the policy.
		return succeeded, unavailable(ErrReply, err)
	}
	return failed, unavailable(ErrRedis, err)
}

// isDataError reports whether err is an error reply about the data or the
// script rather than the server's availability: a key holding another type,
// or an error raised by a script.
func isDataError(err error) bool {
	if errors.Is(err, redis.Nil) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "WRONGTYPE") ||
		strings.Contains(msg, "floodgate:") ||
		strings.Contains(msg, "user_script") || // Lua errors on Redis 6 and 7
		strings.Contains(msg, "Error running script")
}

// clock returns the time of a decision the store makes without Redis.
func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// fallback makes the decision Redis failed to make, as the failure policy
// says. cause matches floodgate.ErrUnavailable.
func (s *Store) fallback(ctx context.Context, key string, a algo, req floodgate.Request, cause error) (floodgate.Result, error) {
	if s.policy == FailError {
		s.observe(Event{Kind: EventError, Key: key, Err: cause})
		return floodgate.Result{}, cause
	}
	var res floodgate.Result
	switch s.policy {
	case FailOpen:
		res = floodgate.Result{At: s.clock(), Decision: floodgate.Decision{Limit: a.quota}}
		if req.Op != floodgate.OpRefund {
			res.Allowed, res.Granted = true, min(req.N, a.quota)
			res.Remaining = a.quota - res.Granted
		}
	case FailClosed:
		res = floodgate.Result{At: s.clock(), Decision: floodgate.Decision{Limit: a.quota}}
		if req.Op != floodgate.OpRefund {
			res.RetryAfter = s.cooldown
		}
	case FailLocal:
		alg := a.scale(s.share)
		var err error
		res, err = s.local.Apply(ctx, key, alg, req)
		switch {
		case errors.Is(err, floodgate.ErrExceedsLimit):
			// More than the local share can ever admit: deny until Redis
			// can be asked again.
			res = floodgate.Result{At: s.clock(), Decision: floodgate.Decision{Limit: alg.Policy().Quota, RetryAfter: s.cooldown}}
		case err != nil:
			err = unavailable(ErrRedis, errors.Join(cause, err))
			s.observe(Event{Kind: EventError, Key: key, Err: err})
			return floodgate.Result{}, err
		}
	}
	s.observe(Event{Kind: EventFallback, Key: key, Err: cause, Policy: s.policy})
	return res, nil
}

// report tells the observer of a breaker change.
func (s *Store) report(c change) {
	if !c.none() {
		s.observe(Event{Kind: EventBreaker, From: c.from, To: c.to})
	}
}

func (s *Store) observe(e Event) {
	if s.observer != nil {
		s.observer.Observe(e)
	}
}
