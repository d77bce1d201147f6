package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// okHandler counts the requests that reach it.
type okHandler struct {
	mu sync.Mutex
	n  int
}

func (h *okHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

func (h *okHandler) served() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// do sends one request from remoteAddr through handler.
func do(t *testing.T, handler http.Handler, remoteAddr string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/items/1", nil)
	req.RemoteAddr = remoteAddr
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec
}

func TestMiddlewareAllowedResponseCarriesIETFFields(t *testing.T) {
	next := &okHandler{}
	h := newMW(t, always(allowed42, nil), nil)(next)
	rec := do(t, h, "192.0.2.1:1234")

	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "ok", rec.Body.String())
	assert.Equal(t, `"default";q=100;w=60`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=42;t=17`, rec.Header().Get("RateLimit"))
	assert.Empty(t, rec.Header().Values("Retry-After"))
	assert.Empty(t, rec.Header().Values("X-RateLimit-Limit"))
	assert.Equal(t, 1, next.served())
}

func TestMiddlewareDenial(t *testing.T) {
	next := &okHandler{}
	h := newMW(t, always(denied, nil), nil)(next)
	rec := do(t, h, "192.0.2.1:1234")

	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, 0, next.served(), "a denied request reached the handler")
	assert.Equal(t, "3", rec.Header().Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=3`, rec.Header().Get("RateLimit"))
	assert.Equal(t, `"default";q=100;w=60`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))

	var body headers.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "body %q", rec.Body.String())
	assert.Equal(t, headers.ErrorDetail{
		Code: "rate_limit_exceeded", Message: "Rate limit exceeded; retry after 3 seconds.", Policy: "default",
		Limit: 100, Remaining: 0, Reset: 3, RetryAfter: 3,
	}, body.Error)
}

func TestMiddlewareProblemDetails(t *testing.T) {
	h := newMW(t, always(denied, nil), &httplimit.Options{
		ProblemDetails: true, PolicyNames: []string{"per-ip"},
	})(&okHandler{})
	rec := do(t, h, "192.0.2.1:1234")

	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	assert.Equal(t, `"per-ip";r=0;t=3`, rec.Header().Get("RateLimit"))
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":"Quota Exceeded","status":429,"detail":"Rate limit exceeded; retry after 3 seconds.",
		"violated-policies":["per-ip"]}`, rec.Body.String())
}

func TestMiddlewareStyles(t *testing.T) {
	now := time.Unix(1_700_000_000, 500_000_000)
	tests := []struct {
		name string
		opts httplimit.Options
		d    floodgate.Decision
		want http.Header
	}{
		{"draft", httplimit.Options{Style: headers.StyleDraft}, allowed42, http.Header{
			"Ratelimit-Limit": {"100"}, "Ratelimit-Remaining": {"42"}, "Ratelimit-Reset": {"17"},
		}},
		{"x delta", httplimit.Options{Style: headers.StyleX}, denied, http.Header{
			"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"3"},
			"Retry-After": {"3"},
		}},
		{"x epoch", httplimit.Options{
			Style: headers.StyleX, XReset: headers.ResetEpoch, Now: func() time.Time { return now },
		}, allowed42, http.Header{
			"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"42"}, "X-Ratelimit-Reset": {"1700000017"},
		}},
		{"ietf and x", httplimit.Options{Style: headers.StyleIETF | headers.StyleX}, allowed42, http.Header{
			"Ratelimit-Policy": {`"default";q=100;w=60`}, "Ratelimit": {`"default";r=42;t=17`},
			"X-Ratelimit-Limit": {"100"}, "X-Ratelimit-Remaining": {"42"}, "X-Ratelimit-Reset": {"17"},
		}},
		{"omitted, allowed", httplimit.Options{OmitFields: true}, allowed42, http.Header{}},
		{"omitted, denied keeps Retry-After", httplimit.Options{OmitFields: true}, denied, http.Header{
			"Retry-After": {"3"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newMW(t, always(tt.d, nil), &tt.opts)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			rec := do(t, h, "192.0.2.1:1234")
			got := rec.Header().Clone()
			for _, k := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options"} {
				got.Del(k)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMiddlewareCustomDenyHandler(t *testing.T) {
	var got floodgate.Decision
	h := newMW(t, always(denied, nil), &httplimit.Options{
		DenyHandler: func(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
			got = d
			assert.Equal(t, "3", w.Header().Get("Retry-After"), "fields must be set before DenyHandler runs")
			w.WriteHeader(http.StatusServiceUnavailable)
		},
	})(&okHandler{})
	rec := do(t, h, "192.0.2.1:1234")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, denied, got)
}

func TestMiddlewareErrors(t *testing.T) {
	storeDown := fmt.Errorf("%w: dial tcp 10.0.0.1:6379: i/o timeout", floodgate.ErrUnavailable)
	tests := []struct {
		name   string
		lim    *floodgate.Limiter
		opts   *httplimit.Options
		status int
		match  error
	}{
		{"store unavailable", always(floodgate.Decision{}, storeDown), nil, http.StatusServiceUnavailable, floodgate.ErrUnavailable},
		{"context ended", always(floodgate.Decision{}, context.DeadlineExceeded), nil, http.StatusServiceUnavailable, context.DeadlineExceeded},
		{"other error", always(floodgate.Decision{}, floodgate.ErrKeyTooLong), nil, http.StatusInternalServerError, floodgate.ErrKeyTooLong},
		{"no key", always(allowed42, nil), &httplimit.Options{Key: httplimit.KeyByAPIKey("X-API-Key")},
			http.StatusUnauthorized, httplimit.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &okHandler{}
			rec := do(t, newMW(t, tt.lim, tt.opts)(next), "192.0.2.1:1234")
			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, 0, next.served(), "the handler ran despite the error")
			if tt.status == http.StatusServiceUnavailable {
				// The limiter's policy, and when to come back
				// (TestMiddlewareStoreFailureAnswers503).
				assert.Equal(t, `"default";r=0;t=1`, rec.Header().Get("RateLimit"))
				assert.Equal(t, "1", rec.Header().Get("Retry-After"))
			} else {
				assert.Empty(t, rec.Header().Values("RateLimit"), "fields without a decision")
				assert.Empty(t, rec.Header().Values("Retry-After"))
			}

			// The same error reaches a custom ErrorHandler.
			var seen error
			opts := httplimit.Options{}
			if tt.opts != nil {
				opts = *tt.opts
			}
			opts.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
				seen = err
				w.WriteHeader(599)
			}
			rec = do(t, newMW(t, tt.lim, &opts)(next), "192.0.2.1:1234")
			assert.Equal(t, 599, rec.Code)
			assert.ErrorIs(t, seen, tt.match)
		})
	}
}

// TestNewRefusesConfigurationErrors: every configuration error is New's,
// at start-up, and never a request's, in shadow mode too: there is no
// middleware that answers 500 to every request of a bad configuration.
func TestNewRefusesConfigurationErrors(t *testing.T) {
	tests := []struct {
		name string
		lim  *floodgate.Limiter
		opts httplimit.Options
	}{
		{"nil limiter", nil, httplimit.Options{}},
		{"zero limiter", &floodgate.Limiter{}, httplimit.Options{}},
		{"unprintable policy name", always(allowed42, nil), httplimit.Options{PolicyNames: []string{"naïve"}}},
		{"negative MaxDelay", always(allowed42, nil), httplimit.Options{MaxDelay: -1}},
		{"unknown style", always(allowed42, nil), httplimit.Options{Style: 1 << 6}},
		{"unknown reset format", always(allowed42, nil), httplimit.Options{XReset: 9}},
		{"negative UnavailableRetryAfter", always(allowed42, nil), httplimit.Options{UnavailableRetryAfter: -time.Second}},
		{"unprintable Challenge", always(allowed42, nil), httplimit.Options{Challenge: "Bearer\n"}},
	}
	for _, tt := range tests {
		for _, shadow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shadow=%v", tt.name, shadow), func(t *testing.T) {
				opts := tt.opts
				opts.Shadow = shadow
				mw, err := httplimit.New(tt.lim, &opts)
				assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
				assert.Nil(t, mw)
			})
		}
	}
}

func TestMiddlewareSkipCost(t *testing.T) {
	lim, fs := alwaysCounted(allowed42, nil)
	next := &okHandler{}
	h := newMW(t, lim, &httplimit.Options{
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		Cost: func(r *http.Request) int64 {
			if r.Method == http.MethodPost {
				return 5
			}
			return 1
		},
	})(next)

	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Empty(t, rec.Header().Values("RateLimit"), "a skipped request carries no fields")
	assert.Empty(t, fs.Calls(), "a skipped request was counted")

	req = httptest.NewRequest(http.MethodPost, "/search", strings.NewReader("q"))
	req.RemoteAddr = "198.51.100.7:999"
	h.ServeHTTP(httptest.NewRecorder(), req)
	do(t, h, "198.51.100.7:999")
	assert.Equal(t, []call{{"ip:198.51.100.7", 5, 0}, {"ip:198.51.100.7", 1, 0}}, fs.Calls())
	assert.Equal(t, 3, next.served())
}

// TestMiddlewareRoutesKeepApart is issue 23's search/upload case behind
// the middleware: two routes limited on one store by the same key keep
// separate quotas without a key prefix, because their limiters' names
// differ (derived from different configurations, or given); limiters of
// one configuration and no name share a quota, as a fleet's must.
func TestMiddlewareRoutesKeepApart(t *testing.T) {
	for _, tt := range []struct {
		name           string
		search, upload floodgate.Algorithm
		names          [2]string // floodgate.Options.Name of search and upload
		want           int       // searches admitted after one upload
	}{
		{"derived names", floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
			floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 1}, [2]string{}, 10},
		{"one configuration, named", floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
			floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, [2]string{"search", "upload"}, 10},
		{"one configuration, no name", floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
			floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, [2]string{}, 9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newStore(t)
				search, err := floodgate.New(store, tt.search, &floodgate.Options{Name: tt.names[0]})
				require.NoError(t, err)
				upload, err := floodgate.New(store, tt.upload, &floodgate.Options{Name: tt.names[1]})
				require.NoError(t, err)
				key := httplimit.KeyBySubject(chainSubjectKey{})
				searchH := newMW(t, search, &httplimit.Options{Key: key})(&okHandler{})
				uploadH := newMW(t, upload, &httplimit.Options{Key: key})(&okHandler{})
				req := func(h http.Handler) int {
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					r = r.WithContext(context.WithValue(r.Context(), chainSubjectKey{}, "alice"))
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					return rec.Code
				}
				require.Equal(t, http.StatusOK, req(uploadH))
				admitted := 0
				for range 10 {
					if req(searchH) == http.StatusOK {
						admitted++
					}
				}
				assert.Equal(t, tt.want, admitted, "searches admitted after one upload")
			})
		})
	}
}

func TestMiddlewareCostErrors(t *testing.T) {
	lim, err := floodgate.New(newStore(t), floodgate.FixedWindow{Limit: 10, Window: time.Minute}, nil)
	require.NoError(t, err)
	for _, tt := range []struct {
		cost int64
		want error
	}{{0, floodgate.ErrInvalidN}, {-3, floodgate.ErrInvalidN}, {11, floodgate.ErrExceedsLimit}} {
		var seen error
		h := newMW(t, lim, &httplimit.Options{
			Cost:         func(*http.Request) int64 { return tt.cost },
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { seen = err; w.WriteHeader(500) },
		})(&okHandler{})
		rec := do(t, h, "192.0.2.1:1")
		assert.Equal(t, 500, rec.Code, "cost %d", tt.cost)
		assert.ErrorIs(t, seen, tt.want, "cost %d", tt.cost)
	}
}

// newStore returns a memstore on the real (or, inside a synctest bubble,
// the virtual) clock.
func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	return s
}

func TestMiddlewareShadowModeNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := floodgate.New(newStore(t), floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 3}, nil)
		require.NoError(t, err)
		var mu sync.Mutex
		var decisions []floodgate.Decision
		next := &okHandler{}
		h := newMW(t, lim, &httplimit.Options{
			Shadow:   true,
			MaxDelay: 10 * time.Second, // shaping is not enforced in shadow mode either
			OnDecision: func(r *http.Request, key string, d floodgate.Decision) {
				mu.Lock()
				decisions = append(decisions, d)
				mu.Unlock()
			},
		})(next)

		start := time.Now()
		for i := range 50 {
			rec := do(t, h, "192.0.2.1:1234")
			require.Equal(t, http.StatusOK, rec.Code, "request %d was blocked in shadow mode", i)
			assert.Empty(t, rec.Header().Values("Retry-After"), "request %d: Retry-After in shadow mode", i)
			st, err := headers.Parse(rec.Header(), nil)
			require.NoError(t, err)
			require.Len(t, st.Limits, 1)
			d := decisions[i]
			assert.Equal(t, d.Remaining, st.Limits[0].Remaining, "request %d: r", i)
			if !d.Allowed {
				// t says when the request would have been admitted.
				assert.Equal(t, time.Duration(headers.Seconds(max(d.RetryAfter, d.Delay)))*time.Second, st.Limits[0].Reset, "request %d: t", i)
			}
		}
		assert.Equal(t, time.Duration(0), time.Since(start), "shadow mode delayed requests")
		assert.Equal(t, 50, next.served())

		var admitted, wouldDelay int
		for _, d := range decisions {
			if d.Allowed {
				admitted++
				if d.Delay > 0 {
					wouldDelay++
				}
			}
		}
		assert.Equal(t, 50, len(decisions))
		assert.Greater(t, wouldDelay, 0, "the limiter never asked for a delay: the test proves nothing")
		assert.Less(t, admitted, 50, "the limiter never denied: the test proves nothing")
	})
}

func TestMiddlewareShadowModeDenials(t *testing.T) {
	lim, err := floodgate.New(newStore(t), floodgate.FixedWindow{Limit: 2, Window: time.Hour}, nil)
	require.NoError(t, err)
	var denials int
	next := &okHandler{}
	h := newMW(t, lim, &httplimit.Options{
		Shadow: true,
		OnDecision: func(r *http.Request, key string, d floodgate.Decision) {
			if !d.Allowed {
				denials++
			}
		},
	})(next)
	for range 10 {
		rec := do(t, h, "192.0.2.1:1234")
		require.Equal(t, http.StatusOK, rec.Code)
	}
	assert.Equal(t, 10, next.served())
	assert.Equal(t, 8, denials)
}

func TestMiddlewareShapingDelaysInsteadOfDenying(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) {
		fs := &fakeStore{
			decide: func(context.Context, string, int64, time.Duration) (floodgate.Decision, error) {
				return floodgate.Decision{Allowed: true, Limit: 5, Remaining: 2, Delay: 3 * time.Second, ResetAfter: 4 * time.Second}, nil
			},
		}
		lim := mustLimiter(fs, floodgate.FixedWindow{Limit: 5, Window: time.Second})
		var servedAt time.Duration
		start := time.Now()
		h := newMW(t, lim, &httplimit.Options{MaxDelay: 10 * time.Second})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { servedAt = time.Since(start) }))

		rec := do(t, h, "192.0.2.1:1234")
		assert.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, 3*time.Second, servedAt, "the handler ran before the decision's delay")
		assert.Equal(t, []call{{"ip:192.0.2.1", 1, 10 * time.Second}}, fs.Calls())
		assert.Equal(t, `"default";r=2;t=4`, rec.Header().Get("RateLimit"))

		// The request's deadline bounds the delay it may be given.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		req.RemoteAddr = "192.0.2.1:1234"
		var seen error
		h = newMW(t, lim, &httplimit.Options{
			MaxDelay:     10 * time.Second,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { seen = err; w.WriteHeader(503) },
		})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler ran after the deadline") }))
		rec = httptest.NewRecorder()
		start = time.Now()
		h.ServeHTTP(rec, req)
		assert.Equal(t, 2*time.Second, fs.Calls()[1].maxDelay, "maxDelay not bounded by the deadline")
		// The fake ignores that bound and asks for 3s: the middleware
		// gives up when the context ends rather than hanging on.
		assert.Equal(t, 2*time.Second, time.Since(start))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.ErrorIs(t, seen, context.DeadlineExceeded)
		assert.Empty(t, rec.Header().Values("RateLimit"), "fields of a request that was not served")
		assert.Equal(t, 1, fs.refunds, "the admission not served was given back")
	})
}

func TestMiddlewareLeakyBucketShapesBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 10 per second, a queue of 4: a burst of 6 is spread 100ms apart
		// and the two that do not fit are denied.
		lim, err := floodgate.New(newStore(t), floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 4}, nil)
		require.NoError(t, err)
		start := time.Now()
		var mu sync.Mutex
		var served []time.Duration
		h := newMW(t, lim, &httplimit.Options{MaxDelay: time.Second})(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				served = append(served, time.Since(start))
				mu.Unlock()
			}))
		codes := make([]int, 6)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() { codes[i] = do(t, h, "192.0.2.1:1234").Code })
			synctest.Wait() // admit them in order
		}
		wg.Wait()
		assert.ElementsMatch(t, []int{200, 200, 200, 200, 429, 429}, codes)
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}, served)
	})
}

// TestMiddlewareDefaultKey: the default key is KeyByIP(nil), the peer
// address with no proxy trusted and IPv6 grouped by /64. Proxies and
// grouping are options of KeyByIP, given with Key, so that no option
// configures a key the middleware does not use.
func TestMiddlewareDefaultKey(t *testing.T) {
	lim, fs := alwaysCounted(allowed42, nil)
	h := newMW(t, lim, nil)(&okHandler{})
	do(t, h, "10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 203.0.113.9")
	do(t, h, "192.0.2.1:1", "X-Forwarded-For", "203.0.113.9")
	do(t, h, "[2001:db8:1:2::1]:1")
	assert.Equal(t, []string{"ip:10.0.0.1", "ip:192.0.2.1", "ip:2001:db8:1:2::/64"}, keys(fs.Calls()))

	lim, fs = alwaysCounted(allowed42, nil)
	h = newMW(t, lim, &httplimit.Options{Key: httplimit.KeyByIP(&httplimit.IPKeyOptions{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		IPv6Prefix:     48,
	})})(&okHandler{})
	do(t, h, "10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 203.0.113.9")
	do(t, h, "192.0.2.1:1", "X-Forwarded-For", "203.0.113.9")
	do(t, h, "[2001:db8:1:2::1]:1")
	assert.Equal(t, []string{"ip:203.0.113.9", "ip:192.0.2.1", "ip:2001:db8:1::/48"}, keys(fs.Calls()))
}

func keys(calls []call) []string {
	var k []string
	for _, c := range calls {
		k = append(k, c.key)
	}
	return k
}

// TestMiddlewareDoesNotOutwaitTheRequest stands in for a dead store without a
// timeout of its own: the limiter blocks until its context ends. The
// middleware passes the request's context, so the request ends at its
// deadline with 503 rather than hanging.
func TestMiddlewareDoesNotOutwaitTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &okHandler{}
		h := newMW(t, mustLimiter(blockingStore{}, hundredPerMinute), nil)(next)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		req.RemoteAddr = "192.0.2.1:1"
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, 0, next.served())
	})
}

// TestMiddlewareShapingRefundsWhenCancelled: a shaped request whose client
// goes away during its delay gives its units back, so the next request
// waits as if it had never come.
// A store the user wrapped (here to count steps) keeps the refund: the
// middleware needs nothing from a store beyond its Bound.
func TestMiddlewareShapingRefundsWhenCancelled(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrapped=%v", wrapped), func(t *testing.T) { testShapingRefund(t, wrapped) })
	}
}

func testShapingRefund(t *testing.T, wrapped bool) {
	synctest.Test(t, func(t *testing.T) {
		// One unit per second, a burst of one: each request is served a
		// second after the one before. (A leaky bucket would keep the slot:
		// its departures are promised.)
		var store floodgate.Store = newStore(t)
		counter := &countingStore{Store: store}
		if wrapped {
			store = counter
		}
		lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, nil)
		require.NoError(t, err)
		var served []time.Duration
		start := time.Now()
		h := newMW(t, lim, &httplimit.Options{
			MaxDelay:     10 * time.Second,
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(499) },
		})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = append(served, time.Since(start)) }))

		rec := do(t, h, "192.0.2.1:1") // served now
		require.Equal(t, http.StatusOK, rec.Code)
		// Queued for 1s, but its client goes away after 300ms (a
		// cancellation, not a deadline, which would bound the delay).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			time.Sleep(300 * time.Millisecond)
			cancel()
		}()
		req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		req.RemoteAddr = "192.0.2.1:1"
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, 499, rec.Code)
		// Its unit came back: the next request is served 1s after the
		// first, not 2s.
		rec = do(t, h, "192.0.2.1:1")
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, []time.Duration{0, time.Second}, served, "the cancelled request's slot was not given back")
		if wrapped {
			assert.EqualValues(t, 4, counter.applies.Load(), "three takes and one refund through the wrapper")
		}
	})
}
