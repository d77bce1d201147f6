package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/observe"
)

// What the store tells Options.Observer (see the package doc, Observer):
// every round trip (OnStoreCall, here), the decisions Redis failed to make
// (OnFailures, counted: failures.go) and every change of a breaker
// (OnBreaker, here).

// mono is the origin of the round trips' monotonic readings: time.Since
// of a Time that carries a monotonic reading reads only the monotonic
// clock, which time.Now would read along with the wall clock.
var mono = time.Now()

// trip is how a script call reports its round trips to OnStoreCall: the
// context given to the observer (the caller's, or context.Background()
// for the batcher's own calls), the node called, and the decisions the
// call carries. A trip whose s is nil reports nothing: a value, so that
// reporting allocates nothing.
type trip struct {
	s         *Store
	ctx       context.Context
	node      string
	decisions int
}

// trip returns the trip of a call to node n carrying decisions, or one
// that reports nothing when no one listens.
func (s *Store) trip(ctx context.Context, n *node, decisions int) trip {
	if s.onCall == nil {
		return trip{}
	}
	return trip{s: s, ctx: ctx, node: n.addr, decisions: decisions}
}

// process sends cmd through p, timing it when t reports.
func (t trip) process(ctx context.Context, p processor, cmd *redis.Cmd) {
	if t.s == nil {
		_ = p.Process(ctx, once{cmd})
		return
	}
	start := time.Since(mono)
	_ = p.Process(ctx, once{cmd})
	t.report(time.Since(mono)-start, cmd.Err())
}

// timed runs one round trip, timing it when t reports.
func (t trip) timed(call func() *redis.Cmd) *redis.Cmd {
	if t.s == nil {
		return call()
	}
	start := time.Since(mono)
	cmd := call()
	t.report(time.Since(mono)-start, cmd.Err())
	return cmd
}

// report tells OnStoreCall of one round trip that took latency and ended
// with err.
func (t trip) report(latency time.Duration, err error) {
	t.tell(latency, callOutcome(t.ctx, err), err)
}

// tell tells OnStoreCall of one round trip.
func (t trip) tell(latency time.Duration, outcome observe.CallOutcome, err error) {
	t.s.onCall(t.ctx, observe.StoreCall{Name: t.s.name, Node: t.node, Decisions: t.decisions, Outcome: outcome, Err: err, Latency: latency})
}

// callOutcome says how a round trip that ended with err went, for a
// caller whose context is ctx: CallOK when Redis answered the command
// (a reply, or an error reply about the script or the data: a script's
// error, WRONGTYPE, NOSCRIPT, a Cluster's redirection), CallTimeout when
// no answer came in time (the store's timeout, or go-redis' own), and
// CallError otherwise: a network error, a refusal (CLUSTERDOWN,
// MASTERDOWN, LOADING and the like), a caller who gave up. It tells
// CallOK where classify says that Redis answered (succeeded), and
// CallTimeout and CallError where it sends the decision to the failure
// policy or to a caller who left.
func callOutcome(ctx context.Context, err error) observe.CallOutcome {
	if err == nil {
		return observe.CallOK
	}
	if ctx.Err() != nil {
		return observe.CallError // the caller gave up
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
			return observe.CallError // the caller's deadline, as classify says
		}
		return observe.CallTimeout
	}
	if isNoScript(err) || isRedirect(err) || isDataError(err) {
		return observe.CallOK
	}
	return observe.CallError
}

// worse returns the worse of two outcomes of the commands of one
// pipeline: a timeout or an error over an answer.
func worse(a, b observe.CallOutcome) observe.CallOutcome {
	if a == observe.CallOK {
		return b
	}
	return a
}

// redirected returns the address a Cluster's redirection names ("MOVED
// 3999 127.0.0.1:6381", "ASK ..."), or from for one that names none
// (TRYAGAIN: the same node, later).
func redirected(err error, from string) string {
	msg := err.Error()
	if !strings.HasPrefix(msg, "MOVED ") && !strings.HasPrefix(msg, "ASK ") {
		return from
	}
	return msg[strings.LastIndexByte(msg, ' ')+1:]
}

// report tells OnBreaker of a change of n's breaker, if there was one.
func (s *Store) report(ctx context.Context, n *node, c change) {
	if !c.none() && s.onBreaker != nil {
		s.onBreaker(ctx, observe.BreakerChange{Name: s.name, Node: n.addr, From: c.from, To: c.to})
	}
}
