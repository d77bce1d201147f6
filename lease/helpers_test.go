package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// remote wraps a floodgate.Limiter: it counts the calls the lease layer
// makes, and can hold lease round trips at a gate or fail them.
type remote struct {
	floodgate.Limiter
	alg floodgate.Algorithm

	upTo, refunds, allowN, reserves, waits atomic.Int64
	asked, granted, refunded               atomic.Int64

	// gate, when set, holds every OpTakeUpTo until a value is sent or its
	// context ends.
	gate chan struct{}
	// fail, when set, makes OpTakeUpTo fail with it.
	fail atomic.Pointer[error]
	// fake, when set, replaces OpTakeUpTo's result (a store's fail-open).
	fake func(n int64) floodgate.Result

	mu      sync.Mutex
	askLog  []int64
	refLogs []refundCall
}

type refundCall struct {
	n  int64
	at time.Time
}

// newRemote returns a limiter running alg on a fresh memstore. Inside a
// synctest bubble, the store's clock is the bubble's.
func newRemote(t *testing.T, alg floodgate.Algorithm) *remote {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	return wrap(t, store, alg)
}

// wrap returns a limiter running alg on store.
func wrap(t *testing.T, store floodgate.Store, alg floodgate.Algorithm) *remote {
	t.Helper()
	lim, err := floodgate.New(store, alg)
	require.NoError(t, err)
	return &remote{Limiter: lim, alg: alg}
}

// Apply counts and forwards every step; OpTakeUpTo is the lease round trip
// and OpSettle the return of units.
func (r *remote) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	switch req.Op {
	case floodgate.OpTakeUpTo:
		return r.allowUpTo(ctx, key, req.N)
	case floodgate.OpSettle:
		return r.refund(ctx, key, -req.N, req.At)
	}
	return r.Limiter.Apply(ctx, key, req)
}

func (r *remote) allowUpTo(ctx context.Context, key string, n int64) (floodgate.Result, error) {
	r.upTo.Add(1)
	r.asked.Add(n)
	r.mu.Lock()
	r.askLog = append(r.askLog, n)
	r.mu.Unlock()
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return floodgate.Result{}, ctx.Err()
		}
	}
	if err := r.fail.Load(); err != nil {
		return floodgate.Result{}, *err
	}
	if r.fake != nil {
		return r.fake(n), nil
	}
	res, err := r.Limiter.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: n})
	r.granted.Add(res.Granted)
	return res, err
}

func (r *remote) refund(ctx context.Context, key string, n int64, at time.Time) (floodgate.Result, error) {
	r.refunds.Add(1)
	r.mu.Lock()
	r.refLogs = append(r.refLogs, refundCall{n: n, at: at})
	r.mu.Unlock()
	res, err := r.Limiter.Apply(ctx, key, floodgate.Request{Op: floodgate.OpSettle, N: -n, At: at})
	r.refunded.Add(res.Granted)
	return res, err
}

func (r *remote) AllowN(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	r.allowN.Add(1)
	return r.Limiter.AllowN(ctx, key, n)
}

func (r *remote) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error) {
	r.reserves.Add(1)
	return r.Limiter.Reserve(ctx, key, n, maxDelay)
}

func (r *remote) Wait(ctx context.Context, key string, n int64) error {
	r.waits.Add(1)
	return r.Limiter.Wait(ctx, key, n)
}

func (r *remote) setFail(err error) {
	if err == nil {
		r.fail.Store(nil)
		return
	}
	r.fail.Store(&err)
}

func (r *remote) asks() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.askLog...)
}

// newLease returns a lease Limiter over r.
func newLease(t *testing.T, r *remote, o *lease.Options) *lease.Limiter {
	t.Helper()
	var opts lease.Options
	if o != nil {
		opts = *o
	}
	l, err := lease.New(r, &opts)
	require.NoError(t, err)
	return l
}

// remoteLeft returns how many units the remote can admit for key now,
// taking them: the remote's view of what was consumed.
func remoteLeft(t *testing.T, r floodgate.Limiter, key string, quota int64) int64 {
	t.Helper()
	res, err := r.Apply(context.Background(), key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: quota})
	require.NoError(t, err)
	return res.Granted
}

// recorder keeps every event of the Observer it makes.
type recorder struct {
	mu      sync.Mutex
	leases  []observe.Lease
	returns []observe.Return
	ctxs    []context.Context
}

// observer returns an Observer that records into rec.
func (rec *recorder) observer() *observe.Observer {
	return &observe.Observer{
		OnLease: func(ctx context.Context, e observe.Lease) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.leases = append(rec.leases, e)
			rec.ctxs = append(rec.ctxs, ctx)
		},
		OnReturn: func(ctx context.Context, e observe.Return) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.returns = append(rec.returns, e)
			rec.ctxs = append(rec.ctxs, ctx)
		},
	}
}

// leased returns the lease events so far.
func (rec *recorder) leased() []observe.Lease {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.leases)
}

// returned returns the return events so far.
func (rec *recorder) returned() []observe.Return {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.returns)
}

// background reports whether every event came with context.Background():
// the Limiter reports round trips of its own, never a caller's.
func (rec *recorder) background() bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, ctx := range rec.ctxs {
		if ctx != context.Background() {
			return false
		}
	}
	return true
}

// errDown is a store failure.
var errDown = errors.Join(floodgate.ErrUnavailable, errors.New("test: remote down"))
