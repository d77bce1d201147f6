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

// testName is the name of the limiters the tests make.
const testName = "api"

// remote is the lease's remote store: a floodgate.Store over a memstore
// whose Bounds count the steps the lease layer sends them (OpTakeUpTo is
// the lease round trip, OpSettle the return of units, Take and OpTake
// applies the decisions forwarded to the remote), and can hold lease
// round trips at a gate or fail them.
type remote struct {
	store floodgate.Store
	// alg is the algorithm of the tests' limiters, and of remoteLeft.
	alg floodgate.Algorithm

	upTo, refunds            atomic.Int64
	asked, granted, refunded atomic.Int64
	// undoLate counts the lease round trips asking
	// floodgate.Request.UndoLate.
	undoLate atomic.Int64
	// takes counts Take, applies OpTake applies without a delay and
	// reserves those with one (a limiter's Reserve and Wait): the
	// decisions forwarded to the remote. checks counts check-only steps.
	takes, applies, reserves, checks atomic.Int64

	// gate, when set, holds every OpTakeUpTo until a value is sent or its
	// context ends.
	gate chan struct{}
	// fail, when set, makes OpTakeUpTo fail with it.
	fail atomic.Pointer[error]
	// fake, when set, replaces OpTakeUpTo's result (a store's fail-open).
	fake func(n int64) floodgate.Result
	// short, when above 0, is the most units a lease round trip is
	// granted: a remote running low.
	short atomic.Int64
	// delay, when above 0, is how long a lease round trip takes (ns).
	delay atomic.Int64
	// bindErr, when set, is the error of Bind.
	bindErr error

	mu      sync.Mutex
	askLog  []int64
	refLogs []refundCall
	binds   []bindCall
}

type refundCall struct {
	n  int64
	at time.Time
}

// bindCall is one Bind the remote served.
type bindCall struct {
	name string
	alg  floodgate.Algorithm
}

var _ floodgate.Store = (*remote)(nil)

// newRemote returns a remote over a fresh memstore, for limiters of alg.
// Inside a synctest bubble, the store's clock is the bubble's.
func newRemote(t *testing.T, alg floodgate.Algorithm) *remote {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	return wrap(store, alg)
}

// wrap returns a remote over store, for limiters of alg.
func wrap(store floodgate.Store, alg floodgate.Algorithm) *remote {
	return &remote{store: store, alg: alg}
}

// Bind binds the inner store and returns a counting Bound over it.
func (r *remote) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if r.bindErr != nil {
		return nil, r.bindErr
	}
	b, err := r.store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.binds = append(r.binds, bindCall{name: name, alg: alg})
	r.mu.Unlock()
	return &counting{r: r, b: b}, nil
}

// counting is the Bound of remote.Bind.
type counting struct {
	r *remote
	b floodgate.Bound
}

// Apply counts and forwards every step; OpTakeUpTo is the lease round trip
// and OpSettle giving back is the return of units.
func (c *counting) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	r := c.r
	switch {
	case req.Check:
		r.checks.Add(1)
	case req.Op == floodgate.OpTakeUpTo:
		if req.UndoLate {
			r.undoLate.Add(1)
		}
		return c.allowUpTo(ctx, key, req.N)
	case req.Op == floodgate.OpSettle && req.N < 0:
		return c.refund(ctx, key, -req.N, req.At)
	case req.Op == floodgate.OpTake && req.MaxDelay > 0:
		r.reserves.Add(1)
	case req.Op == floodgate.OpTake:
		r.applies.Add(1)
	}
	return c.b.Apply(ctx, key, req, each)
}

// Take counts and forwards a take: a decision the lease forwarded.
func (c *counting) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	c.r.takes.Add(1)
	return c.b.Take(ctx, key, n)
}

func (c *counting) allowUpTo(ctx context.Context, key string, n int64) (floodgate.Result, error) {
	r := c.r
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
	if d := r.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if m := r.short.Load(); m > 0 {
		n = min(n, m)
	}
	res, err := c.b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: n}, nil)
	r.granted.Add(res.Granted)
	return res, err
}

func (c *counting) refund(ctx context.Context, key string, n int64, at time.Time) (floodgate.Result, error) {
	r := c.r
	r.refunds.Add(1)
	r.mu.Lock()
	r.refLogs = append(r.refLogs, refundCall{n: n, at: at})
	r.mu.Unlock()
	res, err := c.b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpSettle, N: -n, At: at}, nil)
	r.refunded.Add(res.Granted)
	return res, err
}

// forwarded returns the decisions forwarded to the remote: takes and
// OpTake applies, with or without a delay.
func (r *remote) forwarded() int64 { return r.takes.Load() + r.applies.Load() + r.reserves.Load() }

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

func (r *remote) bound() []bindCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.binds)
}

// leased is a limiter on a lease Store, as users build one: its decisions
// (Allow, AllowN, Reserve, Wait, Apply) are the Limiter's, and Close,
// Stats and the test accessors the Store's.
type leased struct {
	*floodgate.Limiter
	*lease.Store
}

// newLease returns a limiter of r.alg named testName on a lease Store over
// r.
func newLease(t *testing.T, r *remote, o *lease.Options) leased {
	t.Helper()
	return newNamed(t, r, testName, o)
}

// newNamed returns a limiter of r.alg named name on a lease Store over r.
func newNamed(t *testing.T, r *remote, name string, o *lease.Options) leased {
	t.Helper()
	var opts lease.Options
	if o != nil {
		opts = *o
	}
	ls, err := lease.New(r, &opts)
	require.NoError(t, err)
	lim, err := floodgate.New(ls, r.alg, &floodgate.Options{Name: name})
	if err != nil {
		_ = ls.Close()
	}
	require.NoError(t, err)
	return leased{Limiter: lim, Store: ls}
}

// remoteLeft returns how many units the remote can admit for key now, to
// the limiter of r.alg named testName, taking them: the remote's view of
// what was consumed.
func remoteLeft(t *testing.T, r *remote, key string, quota int64) int64 {
	t.Helper()
	return remoteLeftOf(t, r.store, testName, r.alg, key, quota)
}

// remoteLeftOf returns how many units store can admit for key now, to the
// limiter of alg named name, taking them.
func remoteLeftOf(t *testing.T, store floodgate.Store, name string, alg floodgate.Algorithm, key string, quota int64) int64 {
	t.Helper()
	lim, err := floodgate.New(store, alg, &floodgate.Options{Name: name})
	require.NoError(t, err)
	res, err := lim.Apply(context.Background(), key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: quota}, nil)
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
// the Store reports round trips of its own, never a caller's.
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
