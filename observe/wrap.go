package observe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Wrap returns a Limiter that decides exactly as l does and reports each
// of its decisions to o.OnDecision, named name: Allow, AllowN, Reserve,
// Wait and Apply, so the layers built on a Limiter (lease's refills and
// refunds, httplimit's settlements) are seen too, with their Op. Policy
// and Algorithm are l's.
//
// Wrap returns l itself when o is nil or has no OnDecision: an unobserved
// limiter costs nothing. It returns an error matching
// floodgate.ErrInvalidConfig for a nil l, an empty name or an invalid
// Observer.
//
// With OnDecision set, a decision costs one call of it, and one in
// o.LatencyEvery decisions two readings of the monotonic clock; nothing
// is allocated. Wrap a limiter once, and give the wrapper to the layers
// above it: a lease.Limiter over a wrapped remote reports its refills
// under the remote's name (Op OpTakeUpTo); wrap the lease.Limiter too,
// under another name, to see the decisions it serves.
func Wrap(l floodgate.Limiter, name string, o *Observer) (floodgate.Limiter, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: observe: nil limiter", floodgate.ErrInvalidConfig)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: observe: empty limiter name", floodgate.ErrInvalidConfig)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o == nil || o.OnDecision == nil {
		return l, nil
	}
	limits := 0
	if ls, ok := l.Algorithm().(floodgate.Limits); ok {
		limits = len(ls)
	}
	return &observed{l: l, name: name, on: o.OnDecision, limits: limits, every: o.latencyThreshold()}, nil
}

// observed is the Limiter of Wrap.
type observed struct {
	l      floodgate.Limiter
	name   string
	on     func(context.Context, Decision)
	limits int
	every  uint64 // a decision is timed when rand.Uint32() < every
}

// mono is the origin of the monotonic readings: time.Since of a Time that
// carries a monotonic reading reads the monotonic clock only.
var mono = time.Now()

// timed reports whether this decision is one of those timed.
func (w *observed) timed() bool { return uint64(rand.Uint32()) < w.every }

// since returns the time since the monotonic reading t0 of a timed
// decision, or 0 for one that is not (t0 < 0).
func since(t0 time.Duration) time.Duration {
	if t0 < 0 {
		return 0
	}
	return time.Since(mono) - t0
}

// startClock returns a monotonic reading for a timed decision and -1 for
// one that is not.
func (w *observed) startClock() time.Duration {
	if !w.timed() {
		return -1
	}
	return time.Since(mono)
}

// report tells OnDecision of one decision.
func (w *observed) report(ctx context.Context, key string, op floodgate.Op, check, wait bool, n int64, d *floodgate.Decision, err error, latency time.Duration) {
	outcome := Failed
	switch {
	case err == nil && d.Allowed:
		outcome = Allowed
	case err == nil, wait && errors.Is(err, floodgate.ErrWaitExceedsDeadline):
		outcome = Denied
	}
	w.on(ctx, Decision{Name: w.name, Key: key, Op: op, Check: check, Wait: wait, N: n, Outcome: outcome, Decision: *d, Limits: w.limits, Err: err, Latency: latency})
}

func (w *observed) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	t0 := w.startClock()
	d, err := w.l.Allow(ctx, key)
	w.report(ctx, key, floodgate.OpTake, false, false, 1, &d, err, since(t0))
	return d, err
}

func (w *observed) AllowN(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	t0 := w.startClock()
	d, err := w.l.AllowN(ctx, key, n)
	w.report(ctx, key, floodgate.OpTake, false, false, n, &d, err, since(t0))
	return d, err
}

func (w *observed) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error) {
	t0 := w.startClock()
	d, err := w.l.Reserve(ctx, key, n, maxDelay)
	w.report(ctx, key, floodgate.OpTake, false, false, n, &d, err, since(t0))
	return d, err
}

// Wait is not timed: its duration is mostly the sleep it was asked for.
func (w *observed) Wait(ctx context.Context, key string, n int64) error {
	err := w.l.Wait(ctx, key, n)
	d := floodgate.Decision{Allowed: err == nil}
	w.report(ctx, key, floodgate.OpTake, false, true, n, &d, err, 0)
	return err
}

func (w *observed) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	t0 := w.startClock()
	res, err := w.l.Apply(ctx, key, req)
	w.report(ctx, key, req.Op, req.Check, false, req.N, &res.Decision, err, since(t0))
	return res, err
}

func (w *observed) Policy() floodgate.Policy { return w.l.Policy() }

func (w *observed) Algorithm() floodgate.Algorithm { return w.l.Algorithm() }
