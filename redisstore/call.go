package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// errStarved reports a decision that found none of its node's MaxInFlight
// slots free before its deadline (batched: that no batch took in time).
var errStarved = errors.New("redisstore: no free slot before the deadline")

// call runs the script id at node n on rkey, or on keys when they are
// not nil (a Limits'; rkey is then the first). Options.Timeout bounds
// the whole call, from the wait for one of n's MaxInFlight slots (at most
// half of it; see waitSlot) to the reply. A batching node sends the call
// at once, from the caller's goroutine, when it has nothing in flight
// (the direct path: a serial caller pays no hop through the batcher and
// the single-decision script, as unbatched), and otherwise queues it for
// its batcher, which sends the calls that arrive while others are in
// flight together (see batcher.do). A call made alone (a release of an
// in-flight hold, which frees a slot others wait for, must not queue
// behind their Acquires) takes the unbatched path whatever is in flight.
//
// A call with late (a take asking floodgate.Request.UndoLate) always goes
// to the batcher, whose goroutine reads a reply that comes after the
// caller gave up (up to lateFor, or Timeout, past the deadline) and hands
// it to late; the direct path's connection is closed at the deadline,
// its reply lost.
func (s *Store) call(ctx context.Context, n *node, id prog, alone bool, rkey string, keys []string, args []any, late func(any)) (reply any, err error) {
	if b := n.batch; b != nil && !alone {
		if late != nil || !b.active.CompareAndSwap(0, 1) {
			return b.do(ctx, id, rkey, keys, args, late)
		}
		defer b.active.Add(-1)
	}
	// The round trips are the caller's: OnStoreCall gets its context.
	t := s.trip(ctx, n, 1)
	timeout := s.timeout
	if timeout != NoTimeout {
		if s.guard {
			// guarded waits for ctx.Done after the caller returns.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		} else {
			c := startCall(ctx, timeout)
			defer c.end()
			ctx = c
		}
	}
	select {
	case n.gate <- struct{}{}:
	default:
		if err := s.waitSlot(ctx, n, timeout); err != nil {
			return nil, err
		}
	}
	if !s.guard || timeout == NoTimeout {
		// The client bounds the call by ctx (see derive); with NoTimeout
		// the caller's context and go-redis' timeouts do.
		reply, err = s.runAt(ctx, n, id, rkey, keys, args, t)
		<-n.gate
		n.answered(err)
		return reply, err
	}
	return s.guarded(ctx, n, id, rkey, keys, args, t)
}

// guarded runs a call on its own goroutine and stops waiting at ctx's
// deadline, for a client that would not stop there. The goroutine keeps
// its slot (and its connection) until go-redis gives up (its read, write
// and pool timeouts), so at most MaxInFlight such calls run at once per
// node; Close waits for them.
func (s *Store) guarded(ctx context.Context, n *node, id prog, rkey string, keys []string, args []any, t trip) (any, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		<-n.gate
		return nil, unavailable(floodgate.ErrClosed, nil)
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
		v, err := s.runAt(ctx, n, id, rkey, keys, args, t)
		<-n.gate
		n.answered(err)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// callCtx is the context of one call with a timeout: context.WithTimeout
// without its five allocations, reused through callCtxs. Its Done is
// closed at its deadline, not when its parent ends (a caller that cancels
// still waits at most the timeout), and Err reports either. It may be
// used only until end: a client that keeps a call's context after the call
// returns (guarded) needs context.WithTimeout.
type callCtx struct {
	context.Context
	deadline time.Time
	done     chan struct{} // closed by fire
	timer    *time.Timer   // fires at deadline; stopped by end
	expired  atomic.Bool
}

var callCtxs = sync.Pool{New: func() any {
	c := &callCtx{done: make(chan struct{})}
	c.timer = time.AfterFunc(time.Hour, c.fire)
	c.timer.Stop()
	return c
}}

// startCall returns a callCtx of parent ending within timeout.
func startCall(parent context.Context, timeout time.Duration) *callCtx {
	c := callCtxs.Get().(*callCtx)
	c.Context, c.deadline = parent, time.Now().Add(timeout)
	if d, ok := parent.Deadline(); ok && d.Before(c.deadline) {
		c.deadline, timeout = d, time.Until(d)
	}
	c.timer.Reset(timeout)
	return c
}

func (c *callCtx) fire() {
	c.expired.Store(true)
	close(c.done)
}

// end stops c's timer and returns c to callCtxs.
func (c *callCtx) end() {
	if !c.timer.Stop() {
		// The timer has fired: fire runs, or has run, on its own
		// goroutine; wait for it before c serves another call.
		<-c.done
		c.done = make(chan struct{})
		c.expired.Store(false)
	}
	c.Context = nil
	callCtxs.Put(c)
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

func (c *callCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// waitSlot waits for one of n's slots, at most half of timeout (none with
// NoTimeout: then ctx alone bounds the wait). A call that got its slot
// later would have too little of its timeout left to be answered: under
// a burst of more callers than slots, every call would then time out, the
// node would answer none, and its breaker would open on a healthy Redis.
// Failing the late ones unsent keeps the slots serving the others.
func (s *Store) waitSlot(ctx context.Context, n *node, timeout time.Duration) error {
	var late <-chan time.Time
	if timeout != NoTimeout {
		t := time.NewTimer(timeout / 2)
		defer t.Stop()
		late = t.C
	}
	select {
	case n.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errStarved, ctx.Err())
	case <-late:
		return fmt.Errorf("%w: %w", errStarved, context.DeadlineExceeded)
	}
}

// runAt runs the script id on keys at node n: on a Cluster or a
// Ring, straight to the node's client, which the store already asked for
// n; when a Cluster refuses it there (MOVED, ASK: the slot has moved or
// is migrating), through the ClusterClient, which follows the
// redirection. Neither sends a script twice (see once). t reports the
// round trips: the redirected call as one to the node the redirection
// names (the ClusterClient may make more, following further ones).
func (s *Store) runAt(ctx context.Context, n *node, id prog, rkey string, keys []string, args []any, t trip) (any, error) {
	c := n.client.Load()
	if c == nil || s.single != nil {
		return run(ctx, s.client, id, false, rkey, keys, args, t)
	}
	reply, err := run(ctx, c, id, false, rkey, keys, args, t)
	if s.cluster != nil && isRedirect(err) {
		if t.s != nil {
			t.node = redirected(err, t.node)
		}
		return run(ctx, s.cluster, id, false, rkey, keys, args, t)
	}
	return reply, err
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
	if errors.Is(err, floodgate.ErrClosed) {
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
	if isRefusal(err) {
		// The node is up and refuses: its Cluster lost a master's slots
		// (CLUSTERDOWN, with cluster-require-full-coverage), or a master
		// is failing over. The decision goes to the policy; the node's
		// breaker does not open for it, so that it serves again as soon
		// as its Cluster does.
		return refused, unavailable(ErrRedis, err)
	}
	return failed, unavailable(ErrRedis, err)
}

// isRefusal reports whether err is a node's refusal of a command while its
// Cluster is down or failing over.
func isRefusal(err error) bool {
	return redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "MASTERDOWN")
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

// fallback makes the decision Redis failed to make on node n (nil: no
// node was found), as the failure policy says, and counts it for
// OnFailures. cause matches floodgate.ErrUnavailable.
func (s *Store) fallback(ctx context.Context, n *node, key string, b *bound, req floodgate.Request, each []floodgate.Decision, cause error) (floodgate.Result, error) {
	if s.policy == FailError {
		s.failures(n, true, cause)
		return floodgate.Result{}, cause
	}
	a := b.a
	var res floodgate.Result
	switch s.policy {
	case FailOpen:
		res = a.failed(req, s.clock(), true, 0, each)
	case FailClosed:
		res = a.failed(req, s.clock(), false, s.cooldown, each)
	case FailLocal:
		var err error
		res, err = b.local.Apply(ctx, key, req, each)
		if errors.Is(err, floodgate.ErrExceedsLimit) {
			// More than the local share can ever admit: deny until Redis
			// can be asked again. (resolve validated the share at Bind.)
			if local, lerr := resolve(a.scale(s.share)); lerr == nil {
				res, err = local.failed(req, s.clock(), false, s.cooldown, each), nil
			}
		}
		if err != nil {
			err = unavailable(ErrRedis, errors.Join(cause, err))
			s.failures(n, false, err)
			return floodgate.Result{}, err
		}
	}
	s.failures(n, true, cause)
	return res, nil
}
