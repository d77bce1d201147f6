package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// The doubles of the middleware's tests. The middleware takes a
// *floodgate.Limiter, a concrete type; what a test scripts is the store
// below it: a fakeStore states a Decision exactly instead of driving an
// algorithm into it, and the wrappers stand for the store wrappers a user
// may put between a limiter and its store.

// fakeStore is a floodgate.Store, and the Bound of every algorithm bound
// to it, that gives the decisions decide scripts and records its calls.
type fakeStore struct {
	quota   int64 // the Policy().Quota of the algorithm bound
	mu      sync.Mutex
	decide  func(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error)
	calls   []call
	refunds int
}

var _ floodgate.Store = (*fakeStore)(nil)

type call struct {
	key      string
	n        int64
	maxDelay time.Duration
}

func (f *fakeStore) Bind(_ string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	f.quota = alg.Policy().Quota
	return f, nil
}

// Take checks its arguments, as every store does (the middleware's
// errors of a bad cost come from there), and is the scripted decision.
func (f *fakeStore) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Decision{}, err
	}
	if err := floodgate.CheckRequest(floodgate.Request{N: n}, f.quota); err != nil {
		return floodgate.Decision{}, err
	}
	return f.record(ctx, key, n, 0)
}

// Apply is the scripted decision for OpTake; it records refunds (OpSettle)
// and gives nothing back.
func (f *fakeStore) Apply(ctx context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	if req.Op == floodgate.OpSettle {
		f.mu.Lock()
		f.refunds++
		f.mu.Unlock()
		return floodgate.Result{}, nil
	}
	d, err := f.record(ctx, key, req.N, req.MaxDelay)
	return floodgate.Result{Decision: d, At: time.Now()}, err
}

func (f *fakeStore) record(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{key, n, maxDelay})
	f.mu.Unlock()
	return f.decide(ctx, key, n, maxDelay)
}

// Calls returns the steps the store was asked for, in order.
func (f *fakeStore) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// hundredPerMinute is the policy of the fake limiters: "default";q=100;w=60.
var hundredPerMinute = floodgate.FixedWindow{Limit: 100, Window: time.Minute}

// mustLimiter is floodgate.New, for configurations that cannot fail.
func mustLimiter(store floodgate.Store, alg floodgate.Algorithm) *floodgate.Limiter {
	lim, err := floodgate.New(store, alg, nil)
	if err != nil {
		panic(fmt.Sprintf("floodgate.New(%T, %v, nil): %v", store, alg, err))
	}
	return lim
}

// scripted returns a limiter of 100 per minute whose store gives what
// decide returns, and the store, for its calls.
func scripted(decide func(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error)) (*floodgate.Limiter, *fakeStore) {
	fs := &fakeStore{decide: decide}
	return mustLimiter(fs, hundredPerMinute), fs
}

// alwaysCounted returns a limiter of 100 per minute that gives d (or err)
// to every request, and its store, for its calls.
func alwaysCounted(d floodgate.Decision, err error) (*floodgate.Limiter, *fakeStore) {
	return scripted(func(context.Context, string, int64, time.Duration) (floodgate.Decision, error) { return d, err })
}

// always is alwaysCounted's limiter.
func always(d floodgate.Decision, err error) *floodgate.Limiter {
	lim, _ := alwaysCounted(d, err)
	return lim
}

var (
	allowed42 = floodgate.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 16500 * time.Millisecond}
	denied    = floodgate.Decision{Allowed: false, Limit: 100, Remaining: 0, RetryAfter: 2100 * time.Millisecond, ResetAfter: 58 * time.Second}
)

// failingStore is a store that has failed: every step returns err.
type failingStore struct{ err error }

func (f failingStore) Bind(string, floodgate.Algorithm) (floodgate.Bound, error) { return f, nil }

func (f failingStore) Take(context.Context, string, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, f.err
}

func (f failingStore) Apply(context.Context, string, floodgate.Request, []floodgate.Decision) (floodgate.Result, error) {
	return floodgate.Result{}, f.err
}

// failing returns a limiter of alg on a store that has failed with err.
func failing(alg floodgate.Algorithm, err error) *floodgate.Limiter {
	return mustLimiter(failingStore{err}, alg)
}

// blockingStore stands for a dead store without a timeout of its own:
// every step blocks until its context ends.
type blockingStore struct{}

func (b blockingStore) Bind(string, floodgate.Algorithm) (floodgate.Bound, error) { return b, nil }

func (blockingStore) Take(ctx context.Context, _ string, _ int64) (floodgate.Decision, error) {
	<-ctx.Done()
	return floodgate.Decision{}, fmt.Errorf("%w: %w", floodgate.ErrUnavailable, ctx.Err())
}

func (b blockingStore) Apply(ctx context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	d, err := b.Take(ctx, key, req.N)
	return floodgate.Result{Decision: d}, err
}

// countingStore is a user's store wrapper that counts the Applies of its
// bindings and forwards everything to the store it wraps.
type countingStore struct {
	floodgate.Store
	applies atomic.Int64
}

func (c *countingStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := c.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return countingBound{b, c}, nil
}

type countingBound struct {
	floodgate.Bound
	c *countingStore
}

func (b countingBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b.c.applies.Add(1)
	return b.Bound.Apply(ctx, key, req, each)
}

// withoutEachStore forwards to the store it wraps but never fills the
// decisions of a Limits' limits, as a wrapper answering from a cache of
// its own would not.
type withoutEachStore struct{ floodgate.Store }

func (s withoutEachStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return withoutEachBound{b}, nil
}

type withoutEachBound struct{ floodgate.Bound }

func (b withoutEachBound) Apply(ctx context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	return b.Bound.Apply(ctx, key, req, nil)
}

// newMW is httplimit.New for options that must be valid.
func newMW(t testing.TB, lim *floodgate.Limiter, opts *httplimit.Options) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(lim, opts)
	require.NoError(t, err)
	return mw
}
