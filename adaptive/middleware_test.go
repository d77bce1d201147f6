package adaptive

import (
	"bufio"
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/headers"
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
		{"a nanosecond is a second", &MiddlewareOptions{RetryAfter: time.Nanosecond},
			http.StatusServiceUnavailable, "1", "concurrency limit exceeded\n"},
		{"whole seconds stay", &MiddlewareOptions{RetryAfter: 3 * time.Second},
			http.StatusServiceUnavailable, "3", "concurrency limit exceeded\n"},
		{"the largest Duration does not overflow", &MiddlewareOptions{RetryAfter: math.MaxInt64},
			http.StatusServiceUnavailable, "9223372037", "concurrency limit exceeded\n"},
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
			if tc.opts == nil || tc.opts.Rejected == nil {
				// The value package headers writes for every middleware.
				ra := time.Second
				if tc.opts != nil && tc.opts.RetryAfter != 0 {
					ra = tc.opts.RetryAfter
				}
				assert.Equal(t, headers.FormatRetryAfter(ra), rec.Header().Get("Retry-After"))
				assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
			}
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
	_, err = Middleware(&Limiter{}, nil)
	assert.ErrorIs(t, err, ErrInvalidOption, "a Limiter not made by NewLimiter")
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

// overload is an Outcome hook that counts the handler's own 503 and 504 as
// Dropped.
func overload(status int, _ *http.Request) Outcome {
	if status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout {
		return Dropped
	}
	return Success
}

func TestMiddlewareOutcomeHook(t *testing.T) {
	tests := []struct {
		name    string
		opts    *MiddlewareOptions
		hook    Outcome // what the hook returns when it does not use overload
		handler func(w http.ResponseWriter, r *http.Request, cancel context.CancelFunc)
		status  int // the status the hook must see; 0: the hook must not be called
		want    Stats
	}{
		{"503 is dropped", nil, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			http.Error(w, "dependency saturated", http.StatusServiceUnavailable)
		}, http.StatusServiceUnavailable, Stats{Limit: 1, Dropped: 1}},
		{"504 is dropped", nil, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			w.WriteHeader(http.StatusGatewayTimeout)
		}, http.StatusGatewayTimeout, Stats{Limit: 1, Dropped: 1}},
		{"200 is a success", nil, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("ok"))
		}, http.StatusOK, Stats{Limit: 1, Succeeded: 1}},
		{"a body alone is a 200", nil, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			_, _ = w.Write([]byte("ok"))
			w.WriteHeader(http.StatusServiceUnavailable) // superfluous: too late
		}, http.StatusOK, Stats{Limit: 1, Succeeded: 1}},
		{"nothing written is a 200", nil, 0, func(http.ResponseWriter, *http.Request, context.CancelFunc) {},
			http.StatusOK, Stats{Limit: 1, Succeeded: 1}},
		{"1xx before the final status", nil, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusServiceUnavailable)
		}, http.StatusServiceUnavailable, Stats{Limit: 1, Dropped: 1}},
		{"flush sends a 200", nil, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			w.(http.Flusher).Flush()
			w.WriteHeader(http.StatusServiceUnavailable) // superfluous: too late
		}, http.StatusOK, Stats{Limit: 1, Succeeded: 1}},
		{"hook says ignore", nil, Ignore, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			w.WriteHeader(http.StatusBadRequest)
		}, http.StatusBadRequest, Stats{Limit: 1, Ignored: 1}},
		{"unknown outcome is ignored", nil, Ignore + 1, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			w.WriteHeader(http.StatusOK)
		}, http.StatusOK, Stats{Limit: 1, Ignored: 1}},
		{"deadline still drops", &MiddlewareOptions{Timeout: 100 * ms}, 0, func(w http.ResponseWriter, r *http.Request, _ context.CancelFunc) {
			<-r.Context().Done()
			w.WriteHeader(http.StatusOK)
		}, 0, Stats{Limit: 1, Dropped: 1}},
		{"client gone still ignores", nil, 0, func(w http.ResponseWriter, r *http.Request, cancel context.CancelFunc) {
			cancel()
			w.WriteHeader(http.StatusServiceUnavailable)
		}, 0, Stats{Limit: 1, Ignored: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{limit: 1}
				l := newLimiter(t, rec, nil)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				var handled *http.Request
				called, seen := 0, 0
				var o MiddlewareOptions
				if tc.opts != nil {
					o = *tc.opts
				}
				o.Outcome = func(status int, r *http.Request) Outcome {
					called++
					seen = status
					assert.Same(t, handled, r, "the hook gets the request the handler got")
					if tc.hook != 0 {
						return tc.hook
					}
					return overload(status, r)
				}
				h := newMiddleware(t, l, &o, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					handled = r
					tc.handler(w, r, cancel)
				}))
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
				if tc.status == 0 {
					assert.Zero(t, called, "hook called for a request whose context ended")
				} else {
					assert.Equal(t, 1, called, "hook calls")
					assert.Equal(t, tc.status, seen, "status seen by the hook")
				}
				assert.Equal(t, tc.want, l.Stats())
				assert.Len(t, rec.samples, int(tc.want.Succeeded+tc.want.Dropped), "samples")
			})
		})
	}
}

func TestMiddlewareOutcomePanics(t *testing.T) {
	// A panic in the hook, like one in the handler, releases the slot with
	// Ignore and propagates.
	l := newLimiter(t, fixed(t, 1), nil)
	h := newMiddleware(t, l, &MiddlewareOptions{Outcome: func(int, *http.Request) Outcome { panic("hook") }},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	assert.PanicsWithValue(t, "hook", func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	})
	assert.Equal(t, Stats{Limit: 1, Ignored: 1}, l.Stats())

	called := false
	h = newMiddleware(t, l, &MiddlewareOptions{Outcome: func(int, *http.Request) Outcome { called = true; return Success }},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	assert.PanicsWithValue(t, http.ErrAbortHandler, func() {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	})
	assert.False(t, called, "hook called after the handler panicked")
	assert.Equal(t, Stats{Limit: 1, Ignored: 2}, l.Stats())
}

func TestMiddlewareOutcomeBacksOff(t *testing.T) {
	// The handler answers 503 when its dependency is saturated. With the
	// hook, AIMD sees drops and cuts its limit (10 → 9 → 8 → 7); without it,
	// the 503s are successes and the limit stays where it was.
	for _, tc := range []struct {
		name      string
		opts      *MiddlewareOptions
		wantLimit int
		want      Stats
	}{
		{"with hook", &MiddlewareOptions{Outcome: overload}, 7, Stats{Limit: 7, Dropped: 3, Succeeded: 1}},
		{"without hook", nil, 10, Stats{Limit: 10, Succeeded: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAIMD(&AIMDOptions{InitialLimit: 10, MinLimit: 1})
			require.NoError(t, err)
			l := newLimiter(t, a, nil)
			status := http.StatusServiceUnavailable
			h := newMiddleware(t, l, tc.opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
			}))
			for range 3 {
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			}
			// A 200 is a success: one request in flight of a limit of 7 is
			// application-limited, so AIMD holds its limit.
			status = http.StatusOK
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
			assert.Equal(t, tc.wantLimit, l.Limit())
			assert.Equal(t, tc.want, l.Stats())
		})
	}
}

// hijacker is a ResponseWriter that can be hijacked but not flushed.
type hijacker struct {
	discardWriter
	hijacked bool
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.hijacked = true
	return nil, nil, nil
}

func TestMiddlewareOutcomeWriter(t *testing.T) {
	// With Outcome set the handler gets a wrapped writer; Flush, Unwrap and
	// http.ResponseController still reach the original.
	keep := func(int, *http.Request) Outcome { return Success }
	l := newLimiter(t, fixed(t, 1), nil)

	rec := httptest.NewRecorder()
	h := newMiddleware(t, l, &MiddlewareOptions{Outcome: keep}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		require.True(t, ok, "the wrapper has Unwrap")
		assert.Same(t, rec, u.Unwrap())
		assert.NoError(t, http.NewResponseController(w).Flush())
		w.(http.Flusher).Flush()
	}))
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.True(t, rec.Flushed, "flushed through the wrapper")

	hj := &hijacker{discardWriter: discardWriter{h: http.Header{}}}
	h = newMiddleware(t, l, &MiddlewareOptions{Outcome: keep}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		assert.ErrorIs(t, rc.Flush(), http.ErrNotSupported, "the original cannot flush")
		w.(http.Flusher).Flush() // does nothing, does not panic
		_, _, err := rc.Hijack()
		assert.NoError(t, err)
		assert.True(t, errors.Is(rc.SetWriteDeadline(time.Time{}), http.ErrNotSupported))
	}))
	h.ServeHTTP(hj, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.True(t, hj.hijacked, "hijacked through http.ResponseController")

	h = newMiddleware(t, l, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Same(t, hj, w, "without Outcome the writer is not wrapped")
	}))
	h.ServeHTTP(hj, httptest.NewRequest(http.MethodGet, "/", nil))
}

// discardWriter is a ResponseWriter that keeps nothing, so that allocation
// counts measure the middleware alone.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// middlewareCases are the configurations whose cost is measured: the
// defaults, which must allocate nothing, and Outcome, which allocates the
// status recorder.
var middlewareCases = []struct {
	name   string
	opts   *MiddlewareOptions
	allocs float64
}{
	{"defaults", nil, 0},
	{"outcome", &MiddlewareOptions{Outcome: overload}, 1},
}

func TestMiddlewareAllocs(t *testing.T) {
	for _, tc := range middlewareCases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, fixed(t, 10), nil)
			h := newMiddleware(t, l, tc.opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNoContent)
			}))
			w := &discardWriter{h: http.Header{}}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			allocs := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) })
			assert.Equal(t, tc.allocs, allocs, "allocations per request")
		})
	}
}

// BenchmarkMiddlewareServeHTTP measures the middleware's own cost per
// request around a handler that only writes a status, with a Fixed limit
// and a writer that keeps nothing.
func BenchmarkMiddlewareServeHTTP(b *testing.B) {
	for _, bc := range middlewareCases {
		b.Run(bc.name, func(b *testing.B) {
			f, err := NewFixed(1 << 20)
			if err != nil {
				b.Fatal(err)
			}
			l, err := NewLimiter(f, nil)
			if err != nil {
				b.Fatal(err)
			}
			mw, err := Middleware(l, bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
			w := &discardWriter{h: http.Header{}}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
