package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
)

// The middleware with a floodgate.Limits (issue 14): the IETF fields list
// every limit, the binding one first; the trios, Retry-After and the body
// report the binding one.

// freeLimits is "5 per second and 20 per minute": a token bucket and an
// exact sliding log.
var freeLimits = floodgate.Limits{
	floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5},
	floodgate.SlidingLog{Limit: 20, Window: time.Minute},
}

func newLimiter(t testing.TB, alg floodgate.Algorithm) *floodgate.Limiter {
	t.Helper()
	lim, err := floodgate.New(newStore(t), alg, nil)
	require.NoError(t, err)
	return lim
}

// TestMiddlewareLimitsListsEveryPolicy runs the free limits on virtual time
// to both of their bars. On the old code the fields held one policy,
// "default", with the smallest quota (q=5;w=1), also when the per-minute
// limit bound (q=20;w=1: the window of another limit).
func TestMiddlewareLimitsListsEveryPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &okHandler{}
		h := newMW(t, newLimiter(t, freeLimits), &httplimit.Options{
			Style: headers.StyleIETF | headers.StyleDraft | headers.StyleX,
		})(next)
		const policy = `"5-per-1s";q=5;w=1, "20-per-1m";q=20;w=60`

		for i := range 5 {
			rec := do(t, h, "192.0.2.1:1")
			require.Equal(t, http.StatusOK, rec.Code, "request %d", i)
			assert.Equal(t, policy, rec.Header().Get("RateLimit-Policy"), "request %d", i)
			// The bucket binds: it has the fewest units left.
			assert.Equal(t, fmt.Sprintf(`"5-per-1s";r=%d;t=1, "20-per-1m";r=%d;t=60`, 4-i, 19-i), rec.Header().Get("RateLimit"), "request %d", i)
			assert.Equal(t, "5", rec.Header().Get("X-RateLimit-Limit"))
			assert.Equal(t, fmt.Sprint(4-i), rec.Header().Get("X-RateLimit-Remaining"))
			assert.Equal(t, fmt.Sprint(4-i), rec.Header().Get("RateLimit-Remaining"))
		}
		rec := do(t, h, "192.0.2.1:1")
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"), "one token refills in 200ms")
		assert.Equal(t, policy, rec.Header().Get("RateLimit-Policy"))
		// The log would have admitted it: it reports what it would have
		// left after it (15 are left; 14 tells less, never more).
		assert.Equal(t, `"5-per-1s";r=0;t=1, "20-per-1m";r=14;t=60`, rec.Header().Get("RateLimit"))
		body := denialBody(t, rec)
		assert.Equal(t, "5-per-1s", body.Policy)
		assert.EqualValues(t, 5, body.Limit)
		assert.EqualValues(t, 1, body.RetryAfter)

		// 15 more over the next 3 seconds fill the minute.
		for s := 1; s <= 3; s++ {
			time.Sleep(time.Second)
			for i := range 5 {
				require.Equal(t, http.StatusOK, do(t, h, "192.0.2.1:1").Code, "second %d, request %d", s, i)
			}
		}
		time.Sleep(time.Second)
		rec = do(t, h, "192.0.2.1:1")
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		// The log binds: its oldest 5 units leave at 60s, 56s from now.
		assert.Equal(t, "56", rec.Header().Get("Retry-After"))
		assert.Equal(t, `"20-per-1m";q=20;w=60, "5-per-1s";q=5;w=1`, rec.Header().Get("RateLimit-Policy"))
		assert.Equal(t, `"20-per-1m";r=0;t=56, "5-per-1s";r=4;t=1`, rec.Header().Get("RateLimit"))
		assert.Equal(t, "20", rec.Header().Get("X-RateLimit-Limit"))
		assert.Equal(t, "0", rec.Header().Get("X-RateLimit-Remaining"))
		assert.Equal(t, "56", rec.Header().Get("X-RateLimit-Reset"))
		body = denialBody(t, rec)
		assert.Equal(t, "20-per-1m", body.Policy)
		assert.EqualValues(t, 20, body.Limit)
		assert.EqualValues(t, 56, body.RetryAfter)

		time.Sleep(56 * time.Second)
		rec = do(t, h, "192.0.2.1:1")
		assert.Equal(t, http.StatusOK, rec.Code, "Retry-After was enough")
		assert.Equal(t, 21, next.served())
	})
}

func denialBody(t *testing.T, rec interface{ Result() *http.Response }) headers.ErrorDetail {
	t.Helper()
	res := rec.Result()
	require.Equal(t, headers.ContentTypeJSON, res.Header.Get("Content-Type"))
	var b headers.ErrorBody
	require.NoError(t, json.NewDecoder(res.Body).Decode(&b))
	assert.Equal(t, headers.ErrorCode, b.Error.Code)
	return b.Error
}

// TestMiddlewareLimitsViolatedPolicies: problem details name every limit
// that denied, the binding one (the longest wait) first.
func TestMiddlewareLimitsViolatedPolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMW(t, newLimiter(t, floodgate.Limits{
			floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1},
			floodgate.SlidingWindow{Limit: 100, Window: time.Hour},
			floodgate.FixedWindow{Limit: 1, Window: time.Hour},
		}), &httplimit.Options{ProblemDetails: true})(&okHandler{})
		require.Equal(t, http.StatusOK, do(t, h, "192.0.2.1:1").Code)
		rec := do(t, h, "192.0.2.1:1")
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "3600", rec.Header().Get("Retry-After"))
		var p headers.Problem
		require.Equal(t, headers.ContentTypeProblem, rec.Header().Get("Content-Type"))
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		assert.Equal(t, headers.ProblemTypeQuotaExceeded, p.Type)
		assert.Equal(t, []string{"1-per-1h", "1-per-1s"}, p.ViolatedPolicies)
		assert.Equal(t, `"1-per-1h";r=0;t=3600, "1-per-1s";r=0;t=1, "100-per-1h";r=98;t=7200`, rec.Header().Get("RateLimit"))
	})
}

// TestMiddlewareLimitsPolicyNames: the default names say quota and window,
// repeat with a suffix, and Options.PolicyNames replaces them.
func TestMiddlewareLimitsPolicyNames(t *testing.T) {
	tests := []struct {
		name  string
		alg   floodgate.Limits
		names []string
		want  string // RateLimit-Policy of a 503, which lists the limits in their order
	}{
		{"units", floodgate.Limits{
			floodgate.TokenBucket{Rate: 10, Per: time.Minute, Burst: 5}, // refills in 30s
			floodgate.FixedWindow{Limit: 3, Window: 1500 * time.Millisecond},
			floodgate.SlidingWindow{Limit: 1000, Window: 24 * time.Hour},
			floodgate.SlidingLog{Limit: 100, Window: 36 * time.Hour},
			floodgate.LeakyBucket{Rate: 1, Per: time.Minute, Capacity: 90}, // drains in 90m
		}, nil, `"5-per-30s";q=5;w=30, "3-per-1500ms";q=3;w=2, "1000-per-1d";q=1000;w=86400, "100-per-36h";q=100;w=129600, "90-per-90m";q=90;w=5400`},
		{"repeats", floodgate.Limits{
			floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5},
			floodgate.FixedWindow{Limit: 5, Window: time.Second},
			floodgate.SlidingLog{Limit: 5, Window: time.Second},
		}, nil, `"5-per-1s";q=5;w=1, "5-per-1s-2";q=5;w=1, "5-per-1s-3";q=5;w=1`}, // in the order of the Limits
		{"named", freeLimits, []string{"burst", "minute"}, `"burst";q=5;w=1, "minute";q=20;w=60`},
		{"a Limits of one", floodgate.Limits{freeLimits[1]}, nil, `"20-per-1m";q=20;w=60`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := newLimiter(t, tt.alg)
				opts := &httplimit.Options{PolicyNames: tt.names}
				mw, err := httplimit.New(failing(tt.alg, floodgate.ErrUnavailable), opts)
				require.NoError(t, err)
				rec := do(t, mw(&okHandler{}), "192.0.2.1:1")
				require.Equal(t, http.StatusServiceUnavailable, rec.Code)
				assert.Equal(t, tt.want, rec.Header().Get("RateLimit-Policy"))

				// A decision lists the same policies, the binding one first.
				mw, err = httplimit.New(lim, opts)
				require.NoError(t, err)
				rec = do(t, mw(&okHandler{}), "192.0.2.1:1")
				require.Equal(t, http.StatusOK, rec.Code)
				st, err := headers.Parse(rec.Header(), nil)
				require.NoError(t, err)
				want, err := headers.ParsePolicy(tt.want)
				require.NoError(t, err)
				assert.ElementsMatch(t, want, st.Policies)
				assert.Len(t, st.Limits, len(tt.alg))
			})
		})
	}

	// A single algorithm keeps "default", or the one name of PolicyNames.
	single := floodgate.FixedWindow{Limit: 5, Window: time.Second}
	for _, o := range []struct {
		opts httplimit.Options
		want string
	}{
		{httplimit.Options{}, `"default";q=5;w=1`},
		{httplimit.Options{PolicyNames: []string{"api"}}, `"api";q=5;w=1`},
	} {
		mw, err := httplimit.New(newLimiter(t, single), &o.opts)
		require.NoError(t, err)
		assert.Equal(t, o.want, do(t, mw(&okHandler{}), "192.0.2.1:1").Header().Get("RateLimit-Policy"))
	}
}

func TestMiddlewareLimitsPolicyNamesInvalid(t *testing.T) {
	tests := []struct {
		name string
		alg  floodgate.Algorithm
		opts httplimit.Options
	}{
		{"too few", freeLimits, httplimit.Options{PolicyNames: []string{"burst"}}},
		{"too many", freeLimits, httplimit.Options{PolicyNames: []string{"a", "b", "c"}}},
		{"empty slice", freeLimits, httplimit.Options{PolicyNames: []string{}}},
		{"repeated", freeLimits, httplimit.Options{PolicyNames: []string{"a", "a"}}},
		{"empty name", freeLimits, httplimit.Options{PolicyNames: []string{"a", ""}}},
		{"not ASCII", freeLimits, httplimit.Options{PolicyNames: []string{"a", "minüte"}}},
		{"one for a Limits", freeLimits, httplimit.Options{PolicyNames: []string{"api"}}},
		{"two for one", floodgate.FixedWindow{Limit: 5, Window: time.Second}, httplimit.Options{PolicyNames: []string{"a", "b"}}},
		{"none for one", floodgate.FixedWindow{Limit: 5, Window: time.Second}, httplimit.Options{PolicyNames: []string{}}},
		{"an empty one for one", floodgate.FixedWindow{Limit: 5, Window: time.Second}, httplimit.Options{PolicyNames: []string{""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httplimit.New(newLimiter(t, tt.alg), &tt.opts)
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
		})
	}
}

// TestMiddlewareLimitsStoreFailure: the 503 of a failed store lists every
// policy, each with nothing promised until Retry-After. On the old code it
// listed one, "default", with the smallest quota.
func TestMiddlewareLimitsStoreFailure(t *testing.T) {
	storeDown := fmt.Errorf("%w: connection refused", floodgate.ErrUnavailable)
	for _, problem := range []bool{false, true} {
		t.Run(fmt.Sprintf("problem=%v", problem), func(t *testing.T) {
			next := &okHandler{}
			h := newMW(t, failing(freeLimits, storeDown), &httplimit.Options{
				Style:          headers.StyleIETF | headers.StyleX,
				ProblemDetails: problem,
			})(next)
			rec := do(t, h, "192.0.2.1:1")
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, 0, next.served())
			assert.Equal(t, "1", rec.Header().Get("Retry-After"))
			assert.Equal(t, `"5-per-1s";q=5;w=1, "20-per-1m";q=20;w=60`, rec.Header().Get("RateLimit-Policy"))
			assert.Equal(t, `"5-per-1s";r=0;t=1, "20-per-1m";r=0;t=1`, rec.Header().Get("RateLimit"))
			assert.Equal(t, "5", rec.Header().Get("X-RateLimit-Limit"))
			assert.Equal(t, "0", rec.Header().Get("X-RateLimit-Remaining"))
			if e := errorBody(t, rec, problem); !problem {
				assert.Equal(t, "rate_limit_unavailable", e.Code)
				assert.Equal(t, "5-per-1s", e.Policy)
				assert.EqualValues(t, 5, e.Limit)
				assert.EqualValues(t, 1, e.RetryAfter)
			}
		})
	}
}

// TestMiddlewareLimitsWithoutEach: a limiter whose store leaves the
// decisions of each limit unfilled (withoutEachStore) gets the fields of
// its binding limit alone, never another request's decisions or zeros.
func TestMiddlewareLimitsWithoutEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore(t)
		lim := mustLimiter(store, freeLimits)
		filled := newMW(t, lim, nil)(&okHandler{})
		// The same name on the same store: the same state, read through a
		// wrapper that fills no decision of each limit.
		empty := newMW(t, mustLimiter(withoutEachStore{store}, freeLimits), nil)(&okHandler{})
		// The same pool of buffers is not shared between middlewares,
		// but a filled request first leaves decisions behind in this one.
		require.Equal(t, http.StatusOK, do(t, filled, "192.0.2.1:1").Code)
		for i := range 4 {
			rec := do(t, empty, "192.0.2.1:1")
			require.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, `"5-per-1s";q=5;w=1`, rec.Header().Get("RateLimit-Policy"))
			assert.Equal(t, fmt.Sprintf(`"5-per-1s";r=%d;t=1`, 3-i), rec.Header().Get("RateLimit"))
		}
		for range 15 {
			time.Sleep(time.Second)
			do(t, empty, "192.0.2.1:1")
		}
		rec := do(t, empty, "192.0.2.1:1")
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, `"20-per-1m";q=20;w=60`, rec.Header().Get("RateLimit-Policy"), "the binding limit, by Decision.Binding")
	})
}

// TestMiddlewareLimitsShaping: with MaxDelay, a Limits is reserved with
// Apply as a single algorithm is, and the fields still list every limit.
func TestMiddlewareLimitsShaping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var servedAt []time.Duration
		h := newMW(t, newLimiter(t, floodgate.Limits{
			floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1},
			floodgate.SlidingLog{Limit: 10, Window: time.Minute},
		}), &httplimit.Options{MaxDelay: 5 * time.Second})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			servedAt = append(servedAt, time.Since(start))
		}))
		for range 3 {
			rec := do(t, h, "192.0.2.1:1")
			require.Equal(t, http.StatusOK, rec.Code)
			st, err := headers.Parse(rec.Header(), nil)
			require.NoError(t, err)
			require.Len(t, st.Limits, 2)
			assert.Equal(t, []string{"1-per-1s", "10-per-1m"}, []string{st.Limits[0].Name, st.Limits[1].Name})
		}
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, servedAt, "served one second apart")
	})
}

// TestMiddlewareLimitsAllocations: listing every limit costs no allocation
// per request beyond the limiter's own and those of a single limit's
// fields (the buffer for each limit's Decision comes from a pool), and the single
// limit's path allocates no more than its fields (2: one string for the
// values that vary and one array for the header's []string values).
func TestMiddlewareLimitsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random")
	}
	ctx := context.Background()
	key := func(*http.Request) (string, bool) { return "k", true }
	req, err := http.NewRequest(http.MethodGet, "/", nil)
	require.NoError(t, err)
	serve := func(lim *floodgate.Limiter) float64 {
		h := newMW(t, lim, &httplimit.Options{Key: key})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		w := &discardWriter{h: make(http.Header)}
		return testing.AllocsPerRun(1000, func() {
			clear(w.h)
			h.ServeHTTP(w, req)
		})
	}
	big := floodgate.Limits{
		floodgate.TokenBucket{Rate: 1 << 40, Per: time.Hour, Burst: 1 << 40},
		floodgate.SlidingWindow{Limit: 1 << 50, Window: time.Minute},
	}
	single := newLimiter(t, big[0])
	assert.LessOrEqual(t, testing.AllocsPerRun(1000, func() { _, _ = single.AllowN(ctx, "k", 1) }), 0.0, "memstore's single step allocates")
	singleMW := serve(single)
	assert.LessOrEqual(t, singleMW, 2.0, "the single limit's path")

	composite := newLimiter(t, big)
	var each [2]floodgate.Decision
	own := testing.AllocsPerRun(1000, func() {
		_, _ = composite.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1}, each[:])
	})
	assert.LessOrEqual(t, serve(composite), own+singleMW, "the composite's path beyond its limiter's %v allocations", own)
}
