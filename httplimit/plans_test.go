package httplimit_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// proLimits is "50 per second and 1,000 per minute": a token bucket and a
// sliding window counter.
var proLimits = floodgate.Limits{
	floodgate.TokenBucket{Rate: 50, Per: time.Second, Burst: 50},
	floodgate.SlidingWindow{Limit: 1000, Window: time.Minute},
}

// byPlanHeader chooses the plan named by the request's X-Plan field.
func byPlanHeader(r *http.Request) string { return r.Header.Get("X-Plan") }

// plansHandler serves the free and pro plans on one new store, keyed by
// X-API-Key, the plan from X-Plan. name is the floodgate.Options.Name of
// both plans' limiters; "" leaves them their derived names.
func plansHandler(t *testing.T, name string, opts *httplimit.Options) (http.Handler, *okHandler) {
	t.Helper()
	store := newStore(t)
	free, err := floodgate.New(store, freeLimits, &floodgate.Options{Name: name})
	require.NoError(t, err)
	pro, err := floodgate.New(store, proLimits, &floodgate.Options{Name: name})
	require.NoError(t, err)
	if opts == nil {
		opts = &httplimit.Options{}
	}
	opts.Key = httplimit.KeyByAPIKey("X-API-Key")
	mw, err := httplimit.NewPlans([]httplimit.Plan{
		{Name: "free", Limiter: free},
		{Name: "pro", Limiter: pro},
	}, byPlanHeader, opts)
	require.NoError(t, err)
	next := &okHandler{}
	return mw(next), next
}

func TestNewPlansChoosesPerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, next := plansHandler(t, "", nil)
		for i := range 5 {
			rec := do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "free")
			require.Equal(t, http.StatusOK, rec.Code, "free request %d", i)
			assert.Equal(t, `"5-per-1s";q=5;w=1, "20-per-1m";q=20;w=60`, rec.Header().Get("RateLimit-Policy"))
		}
		assert.Equal(t, http.StatusTooManyRequests, do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "free").Code)
		for i := range 50 {
			rec := do(t, h, "192.0.2.1:1", "X-API-Key", "b", "X-Plan", "pro")
			require.Equal(t, http.StatusOK, rec.Code, "pro request %d", i)
			assert.Equal(t, `"50-per-1s";q=50;w=1, "1000-per-1m";q=1000;w=60`, rec.Header().Get("RateLimit-Policy"))
		}
		rec := do(t, h, "192.0.2.1:1", "X-API-Key", "b", "X-Plan", "pro")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, `"50-per-1s";r=0;t=1, "1000-per-1m";r=949;t=120`, rec.Header().Get("RateLimit"))
		assert.Equal(t, 55, next.served())
	})
}

// TestNewPlansPolicyNames: each plan's names appear in its fields.
func TestNewPlansPolicyNames(t *testing.T) {
	store := newStore(t)
	free, err := floodgate.New(store, freeLimits, nil)
	require.NoError(t, err)
	pro, err := floodgate.New(store, proLimits, nil)
	require.NoError(t, err)
	basic, err := floodgate.New(store, floodgate.FixedWindow{Limit: 100, Window: time.Hour}, nil)
	require.NoError(t, err)
	mw, err := httplimit.NewPlans([]httplimit.Plan{
		{Name: "free", Limiter: free, PolicyNames: []string{"free-burst", "free-minute"}},
		{Name: "pro", Limiter: pro},
		{Name: "basic", Limiter: basic},
		{Name: "team", Limiter: basic, PolicyNames: []string{"team-hour"}},
	}, byPlanHeader, nil)
	require.NoError(t, err)
	h := mw(&okHandler{})
	for plan, want := range map[string]string{
		"free":  `"free-burst";q=5;w=1, "free-minute";q=20;w=60`,
		"pro":   `"50-per-1s";q=50;w=1, "1000-per-1m";q=1000;w=60`,
		"basic": `"default";q=100;w=3600`,
		"team":  `"team-hour";q=100;w=3600`,
	} {
		rec := do(t, h, "192.0.2.1:1", "X-Plan", plan)
		require.Equal(t, http.StatusOK, rec.Code, plan)
		assert.Equal(t, want, rec.Header().Get("RateLimit-Policy"), plan)
	}
}

// TestNewPlansUnknownPlan: a plan function naming no plan is a
// configuration bug: 500 with a JSON body, no fields, nothing counted, and
// OnError told which name; a dry run serves the request.
func TestNewPlansUnknownPlan(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprintf("shadow=%v", shadow), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log errorLog
				h, next := plansHandler(t, "", &httplimit.Options{Shadow: shadow, OnError: log.OnError})
				for _, plan := range []string{"gold", ""} {
					rec := do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", plan)
					noFields(t, rec)
					if shadow {
						assert.Equal(t, http.StatusOK, rec.Code)
					} else {
						assert.Equal(t, http.StatusInternalServerError, rec.Code)
						assert.Equal(t, "rate_limit_error", errorBody(t, rec, false).Code)
						assert.NotContains(t, rec.Body.String(), "gold", "the body names internals")
					}
				}
				calls := log.calls()
				require.Len(t, calls, 2)
				for i, plan := range []string{"gold", ""} {
					assert.ErrorIs(t, calls[i].err, httplimit.ErrUnknownPlan)
					assert.Contains(t, calls[i].err.Error(), fmt.Sprintf("%q", plan))
					assert.True(t, strings.HasPrefix(calls[i].key, "key:"), "key %q", calls[i].key)
				}
				if shadow {
					assert.Equal(t, 2, next.served())
				} else {
					assert.Equal(t, 0, next.served())
				}
				// Nothing was counted: the free plan's quota is whole.
				rec := do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "free")
				assert.Equal(t, `"5-per-1s";r=4;t=1, "20-per-1m";r=19;t=60`, rec.Header().Get("RateLimit"))
			})
		})
	}
}

// TestNewPlansPlanChange: a key that changes plans whose limiters share one
// name keeps the state of the limits its plans share by kind and ordinal
// (the token buckets), and a limit of a kind the new plan lacks starts
// fresh; under the names derived from the plans' configurations, the new
// plan starts fresh and the old one keeps what the key left there.
func TestNewPlansPlanChange(t *testing.T) {
	t.Run("one name", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h, _ := plansHandler(t, "api", nil)
			get := func(plan string) *http.Response {
				return do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", plan).Result()
			}
			for range 5 {
				require.Equal(t, http.StatusOK, get("free").StatusCode)
			}
			require.Equal(t, http.StatusTooManyRequests, get("free").StatusCode)

			// Upgraded at once: the bucket the free plan emptied is the
			// pro plan's, refilling at 50 per second, 20ms a token; the
			// sliding window is new.
			res := get("pro")
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			assert.Equal(t, "1", res.Header.Get("Retry-After"))
			assert.Equal(t, `"50-per-1s";r=0;t=1, "1000-per-1m";r=999;t=120`, res.Header.Get("RateLimit"))
			time.Sleep(20 * time.Millisecond)
			require.Equal(t, http.StatusOK, get("pro").StatusCode)
			time.Sleep(time.Second)
			for i := range 50 {
				require.Equal(t, http.StatusOK, get("pro").StatusCode, "pro request %d", i)
			}

			// Downgraded again: the bucket is empty, and the sliding log
			// kept the free plan's 5 units of the minute.
			res = get("free")
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			assert.Equal(t, `"5-per-1s";r=0;t=1, "20-per-1m";r=14;t=60`, res.Header.Get("RateLimit"))
		})
	})

	t.Run("derived names", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h, _ := plansHandler(t, "", nil)
			for range 5 {
				require.Equal(t, http.StatusOK, do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "free").Code)
			}
			require.Equal(t, http.StatusTooManyRequests, do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "free").Code)
			rec := do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "pro")
			require.Equal(t, http.StatusOK, rec.Code, "the pro plan starts fresh")
			assert.Equal(t, `"50-per-1s";r=49;t=1, "1000-per-1m";r=999;t=120`, rec.Header().Get("RateLimit"))

			// Back on the free plan, the key finds what it left there.
			rec = do(t, h, "192.0.2.1:1", "X-API-Key", "a", "X-Plan", "free")
			require.Equal(t, http.StatusTooManyRequests, rec.Code)
			assert.Equal(t, `"5-per-1s";r=0;t=1, "20-per-1m";r=14;t=60`, rec.Header().Get("RateLimit"))
		})
	})
}

// TestNewPlansStoreFailure: the 503 of a failed store lists the policies of
// the request's plan.
func TestNewPlansStoreFailure(t *testing.T) {
	storeDown := failingStore{floodgate.ErrUnavailable}
	mw, err := httplimit.NewPlans([]httplimit.Plan{
		{Name: "free", Limiter: mustLimiter(storeDown, freeLimits)},
		{Name: "pro", Limiter: mustLimiter(storeDown, proLimits), PolicyNames: []string{"pro-burst", "pro-minute"}},
	}, byPlanHeader, nil)
	require.NoError(t, err)
	rec := do(t, mw(&okHandler{}), "192.0.2.1:1", "X-Plan", "pro")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, `"pro-burst";q=50;w=1, "pro-minute";q=1000;w=60`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"pro-burst";r=0;t=1, "pro-minute";r=0;t=1`, rec.Header().Get("RateLimit"))
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
}

func TestNewPlansInvalid(t *testing.T) {
	lim := newLimiter(t, freeLimits)
	ok := []httplimit.Plan{{Name: "free", Limiter: lim}}
	tests := []struct {
		name   string
		plans  []httplimit.Plan
		choose func(*http.Request) string
		opts   *httplimit.Options
	}{
		{"no plan", nil, byPlanHeader, nil},
		{"nil plan function", ok, nil, nil},
		{"no name", []httplimit.Plan{{Limiter: lim}}, byPlanHeader, nil},
		{"two names alike", []httplimit.Plan{{Name: "free", Limiter: lim}, {Name: "free", Limiter: lim}}, byPlanHeader, nil},
		{"nil limiter", []httplimit.Plan{{Name: "free"}}, byPlanHeader, nil},
		{"policy names that do not fit", []httplimit.Plan{{Name: "free", Limiter: lim, PolicyNames: []string{"one"}}}, byPlanHeader, nil},
		{"policy names alike", []httplimit.Plan{{Name: "free", Limiter: lim, PolicyNames: []string{"a", "a"}}}, byPlanHeader, nil},
		{"Options.PolicyNames", ok, byPlanHeader, &httplimit.Options{PolicyNames: []string{"a", "b"}}},
		{"zero limiter", []httplimit.Plan{{Name: "free", Limiter: &floodgate.Limiter{}}}, byPlanHeader, nil},
		{"invalid options", ok, byPlanHeader, &httplimit.Options{MaxDelay: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httplimit.NewPlans(tt.plans, tt.choose, tt.opts)
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
		})
	}
}
