package adaptive

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newMiddleware(t *testing.T, l *Limiter, o *MiddlewareOptions, h http.Handler) http.Handler {
	t.Helper()
	mw, err := Middleware(l, o)
	require.NoError(t, err)
	return mw(h)
}

func TestMiddlewareRejects(t *testing.T) {
	tests := []struct {
		name       string
		opts       *MiddlewareOptions
		status     int
		retryAfter string
		body       string
	}{
		{"defaults", nil, http.StatusServiceUnavailable, "1", "concurrency limit exceeded\n"},
		{"status and retry-after", &MiddlewareOptions{RejectStatus: http.StatusTooManyRequests, RetryAfter: 1500 * ms},
			http.StatusTooManyRequests, "2", "concurrency limit exceeded\n"},
		{"custom response", &MiddlewareOptions{Rejected: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte("busy"))
		})}, http.StatusTeapot, "1", "busy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, fixed(t, 1), nil)
			called := 0
			h := newMiddleware(t, l, tc.opts, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called++ }))
			hold := mustAcquire(t, l, "")
			defer hold.Success()

			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			assert.Equal(t, tc.status, rec.Code)
			assert.Equal(t, tc.retryAfter, rec.Header().Get("Retry-After"))
			assert.Equal(t, tc.body, rec.Body.String())
			assert.Zero(t, called, "a rejected request must not reach the handler")
		})
	}
}

func TestMiddlewareOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		opts    *MiddlewareOptions
		handler func(w http.ResponseWriter, r *http.Request, cancel context.CancelFunc)
		want    Stats
		panics  bool
	}{
		{"success", nil, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			time.Sleep(10 * ms)
		}, Stats{Limit: 1, Succeeded: 1}, false},
		{"error status is still a success", nil, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			http.Error(w, "nope", http.StatusNotFound)
		}, Stats{Limit: 1, Succeeded: 1}, false},
		{"overran the request's deadline", nil, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			time.Sleep(2 * time.Second) // the test request has a 1s deadline
		}, Stats{Limit: 1, Dropped: 1}, false},
		{"overran the middleware's timeout", &MiddlewareOptions{Timeout: 100 * ms}, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			<-r.Context().Done()
		}, Stats{Limit: 1, Dropped: 1}, false},
		{"client went away", nil, func(w http.ResponseWriter, r *http.Request, cancel context.CancelFunc) {
			cancel()
		}, Stats{Limit: 1, Ignored: 1}, false},
		{"panic", nil, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			panic(http.ErrAbortHandler)
		}, Stats{Limit: 1, Ignored: 1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{limit: 1}
				l := newLimiter(t, rec, nil)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				h := newMiddleware(t, l, tc.opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					assert.Equal(t, 1, l.InFlight(), "in flight while the handler runs")
					tc.handler(w, r, cancel)
				}))
				req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				serve := func() { h.ServeHTTP(httptest.NewRecorder(), req) }
				if tc.panics {
					assert.PanicsWithValue(t, http.ErrAbortHandler, serve)
				} else {
					serve()
				}
				assert.Equal(t, tc.want, l.Stats())
				assert.Len(t, rec.samples, int(tc.want.Succeeded+tc.want.Dropped), "samples")
			})
		})
	}
}

func TestMiddlewarePartition(t *testing.T) {
	l := newLimiter(t, fixed(t, 1), &LimiterOptions{Partitions: []Partition{{Name: "live", Share: 1}}})
	var seen []PartitionStats
	h := newMiddleware(t, l, &MiddlewareOptions{Partition: func(r *http.Request) string { return r.Header.Get("X-Class") }},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { seen = l.Stats().Partitions }))

	hold := mustAcquire(t, l, "") // fills the limit with unknown traffic
	defer hold.Success()
	for _, tc := range []struct {
		class string
		want  int
	}{
		{"live", http.StatusOK},
		{"batch", http.StatusServiceUnavailable},
		{"", http.StatusServiceUnavailable},
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Class", tc.class)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equalf(t, tc.want, rec.Code, "class %q", tc.class)
	}
	assert.Equal(t, []PartitionStats{{Name: "", Limit: 0, InFlight: 1}, {Name: "live", Limit: 1, InFlight: 1}}, seen)
}

func TestMiddlewareInvalid(t *testing.T) {
	l := newLimiter(t, fixed(t, 1), nil)
	_, err := Middleware(nil, nil)
	assert.ErrorIs(t, err, ErrInvalidOption, "nil limiter")
	for name, o := range map[string]MiddlewareOptions{
		"status 200":       {RejectStatus: 200},
		"status 600":       {RejectStatus: 600},
		"negative retry":   {RetryAfter: -time.Second},
		"negative timeout": {Timeout: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Middleware(l, &o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}
