package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/inflight"
)

func newInflight(t *testing.T, limit int64, opts *inflight.Options) *inflight.Limiter {
	t.Helper()
	lim, err := inflight.New(inflight.NewLocalStore(), limit, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	return lim
}

func newInflightMW(t *testing.T, lim *inflight.Limiter, opts *httplimit.InflightOptions) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.NewInflight(lim, opts)
	require.NoError(t, err)
	return mw
}

// gate is a handler that holds each request until it is opened, or until
// its context ends when ctxAware.
type gate struct {
	entered  chan struct{}
	open     chan struct{}
	ctxAware bool
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 100), open: make(chan struct{})} }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.entered <- struct{}{}
	if g.ctxAware {
		select {
		case <-g.open:
		case <-r.Context().Done():
		}
	} else {
		<-g.open
	}
	w.WriteHeader(http.StatusNoContent)
}

// start serves a request from addr on its own goroutine, with ctx, and
// returns the recorder and a channel closed when ServeHTTP returns.
func start(h http.Handler, ctx context.Context, addr string) (*httptest.ResponseRecorder, chan struct{}) {
	req := httptest.NewRequest(http.MethodGet, "/export", nil).WithContext(ctx)
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	return rec, done
}

func TestInflightMiddlewareDeniesAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newInflight(t, 2, &inflight.Options{RetryAfter: 1500 * time.Millisecond})
		g := newGate()
		h := newInflightMW(t, lim, nil)(g)
		ctx := context.Background()
		var dones []chan struct{}
		for range 2 {
			_, done := start(h, ctx, "192.0.2.1:1000")
			<-g.entered
			dones = append(dones, done)
		}
		rec := do(t, h, "192.0.2.1:1001")
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "2", rec.Header().Get(headers.FieldRetryAfter))
		assert.Empty(t, rec.Header().Get(headers.FieldRateLimit), "RateLimit fields on an in-flight denial")
		assert.Equal(t, headers.ContentTypeJSON, rec.Header().Get("Content-Type"))
		var body headers.ErrorBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		assert.Equal(t, headers.ErrorDetail{
			Code: "concurrency_limit_exceeded", Message: "Too many requests in flight; retry after 2 seconds.",
			Policy: "inflight", Limit: 2, Remaining: 0, Reset: 2, RetryAfter: 2,
		}, body.Error)

		// Another key has slots of its own.
		_, other := start(h, ctx, "192.0.2.2:1000")
		<-g.entered

		close(g.open) // every handler returns: their slots come back
		for _, d := range append(dones, other) {
			<-d
		}
		for range 2 {
			_, done := start(h, ctx, "192.0.2.1:1000")
			<-done
		}
		res, err := lim.Acquire(ctx, "ip:192.0.2.1")
		require.NoError(t, err)
		assert.Equal(t, int64(1), res.InFlight, "slots left after the handlers returned")
	})
}

func TestInflightMiddlewareReleasesOnPanic(t *testing.T) {
	lim := newInflight(t, 1, nil)
	h := newInflightMW(t, lim, nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	for range 3 {
		func() {
			defer func() {
				assert.Equal(t, http.ErrAbortHandler, recover(), "the panic goes on after the release")
			}()
			do(t, h, "192.0.2.1:1000")
		}()
	}
	slot, err := lim.Acquire(context.Background(), "ip:192.0.2.1")
	require.NoError(t, err)
	assert.True(t, slot.Allowed, "a panicking handler kept its slot")
}

func TestInflightMiddlewareReleasesOnCancel(t *testing.T) {
	for _, hold := range []bool{false, true} {
		name := "default"
		if hold {
			name = "HoldUntilReturn"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := newInflight(t, 1, nil)
				g := newGate() // ignores its context
				h := newInflightMW(t, lim, &httplimit.InflightOptions{HoldUntilReturn: hold})(g)
				ctx, cancel := context.WithCancel(context.Background())
				_, done := start(h, ctx, "192.0.2.1:1000")
				<-g.entered
				cancel() // the client went away; the handler runs on
				synctest.Wait()
				rec, second := start(h, context.Background(), "192.0.2.1:1001")
				synctest.Wait()
				if hold {
					<-second
					assert.Equal(t, http.StatusTooManyRequests, rec.Code, "a slot freed before its handler returned")
				} else {
					select {
					case <-g.entered: // admitted: the cancelled request's slot was freed
					default:
						t.Fatalf("the slot of a cancelled request was not freed: %d", rec.Code)
					}
				}
				close(g.open)
				<-done
				<-second
				synctest.Wait()
				// Each slot was released once: the one slot is free again.
				s1, _ := lim.Acquire(context.Background(), "ip:192.0.2.1")
				s2, _ := lim.Acquire(context.Background(), "ip:192.0.2.1")
				assert.True(t, s1.Allowed)
				assert.False(t, s2.Allowed)
			})
		})
	}
}

func TestInflightMiddlewareErrors(t *testing.T) {
	ctx := context.Background()
	lim := newInflight(t, 1, nil)
	_, err := httplimit.NewInflight(nil, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = httplimit.NewInflight(&inflight.Limiter{}, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "a Limiter not made by inflight.New")
	_, err = httplimit.NewInflight(lim, &httplimit.InflightOptions{UnavailableRetryAfter: -time.Second})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = httplimit.NewInflight(lim, &httplimit.InflightOptions{Challenge: "Bearer\n"})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)

	ok := &okHandler{}
	noKey := newInflightMW(t, lim, &httplimit.InflightOptions{
		Key: httplimit.KeyByAPIKey("X-API-Key"), Challenge: `Bearer realm="api"`,
	})(ok)
	rec := do(t, noKey, "192.0.2.1:1000")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Equal(t, `Bearer realm="api"`, rec.Header().Get("WWW-Authenticate"))

	tooLong := func(*http.Request) (string, bool) { return strings.Repeat("p", floodgate.MaxKeyLen+1), true }
	long := newInflightMW(t, lim, &httplimit.InflightOptions{Key: tooLong})(ok)
	assert.Equal(t, http.StatusInternalServerError, do(t, long, "192.0.2.1:1000").Code)

	down, err := inflight.New(downStore{}, 1, nil)
	require.NoError(t, err)
	defer down.Close()
	rec = do(t, newInflightMW(t, down, &httplimit.InflightOptions{UnavailableRetryAfter: 3 * time.Second})(ok), "192.0.2.1:1000")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "3", rec.Header().Get(headers.FieldRetryAfter))
	assert.Empty(t, rec.Header().Get(headers.FieldRateLimit), "RateLimit fields on an in-flight 503")
	var body headers.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, "rate_limit_unavailable", body.Error.Code)
	assert.Equal(t, "inflight", body.Error.Policy)
	assert.Equal(t, int64(1), body.Error.Limit)

	closed := newInflight(t, 1, nil)
	mw := newInflightMW(t, closed, nil)(ok)
	require.NoError(t, closed.Close())
	assert.Equal(t, http.StatusInternalServerError, do(t, mw, "192.0.2.1:1000").Code)
	assert.Zero(t, ok.served())

	_, err = lim.Acquire(ctx, "ip:192.0.2.1")
	require.NoError(t, err)
}

// downStore is an inflight.Store whose backend is down.
type downStore struct{}

var _ inflight.Store = downStore{}

func (downStore) Acquire(context.Context, string, string, int64, time.Duration) (inflight.Result, error) {
	return inflight.Result{}, floodgate.ErrUnavailable
}
func (downStore) Renew(context.Context, string, string, inflight.Hold, time.Duration) (bool, error) {
	return false, floodgate.ErrUnavailable
}
func (downStore) Release(context.Context, string, string, inflight.Hold) error { return nil }

func TestInflightMiddlewareOptions(t *testing.T) {
	lim := newInflight(t, 1, nil)
	var (
		mu   sync.Mutex
		seen []string
	)
	g := newGate()
	h := newInflightMW(t, lim, &httplimit.InflightOptions{
		Skip:           func(r *http.Request) bool { return r.Header.Get("X-Health") != "" },
		ProblemDetails: true,
		OnDecision: func(r *http.Request, key string, d inflight.Status) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, key)
		},
	})(g)
	_, done := start(h, context.Background(), "192.0.2.1:1000")
	<-g.entered
	rec := do(t, h, "192.0.2.1:1000")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, headers.ContentTypeProblem, rec.Header().Get("Content-Type"))
	var p headers.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	assert.Equal(t, headers.Problem{Type: "about:blank", Title: "Too Many Requests", Status: 429, Detail: "Too many requests in flight; retry after 1 second."}, p)

	// A skipped request takes no slot.
	go func() { <-g.entered }()
	close(g.open)
	<-done
	rec = do(t, h, "192.0.2.1:1000", "X-Health", "1")
	assert.Equal(t, http.StatusNoContent, rec.Code)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"ip:192.0.2.1", "ip:192.0.2.1"}, seen)
}

// TestInflightMiddlewareRoutesKeepApart: two routes limited on one store by
// the same key keep separate limits without a key prefix, when their
// limiters' names differ.
func TestInflightMiddlewareRoutesKeepApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := inflight.NewLocalStore()
		newLim := func(name string) *inflight.Limiter {
			lim, err := inflight.New(store, 1, &inflight.Options{Name: name})
			require.NoError(t, err)
			t.Cleanup(func() { _ = lim.Close() })
			return lim
		}
		g := newGate()
		export := newInflightMW(t, newLim("export"), nil)(g)
		search := newInflightMW(t, newLim("search"), nil)(&okHandler{})
		sameName := newInflightMW(t, newLim("export"), nil)(&okHandler{})

		_, done := start(export, context.Background(), "192.0.2.1:1000")
		<-g.entered
		assert.Equal(t, http.StatusOK, do(t, search, "192.0.2.1:1001").Code, "another route's limiter took the slot")
		assert.Equal(t, http.StatusTooManyRequests, do(t, sameName, "192.0.2.1:1001").Code, "one name, one limit")
		close(g.open)
		<-done
	})
}

// TestInflightMiddlewareConcurrent: many requests at once never run more
// handlers than the limit.
func TestInflightMiddlewareConcurrent(t *testing.T) {
	const limit = 3
	lim := newInflight(t, limit, nil)
	var (
		mu         sync.Mutex
		now, most  int
		ok, denied int
	)
	h := newInflightMW(t, lim, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		now++
		most = max(most, now)
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		now--
		mu.Unlock()
	}))
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				rec := do(t, h, "192.0.2.1:1000")
				mu.Lock()
				if rec.Code == http.StatusOK {
					ok++
				} else {
					denied++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most, limit)
	assert.Positive(t, ok)
	t.Logf("%d served, %d denied, at most %d at once", ok, denied, most)
}
