package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
)

// TestMiddlewareAdmittedAllocations: an admitted request costs at most 2
// allocations, those of its rate-limit fields (one string for the values
// that vary, one array for the fields' []string values; the policies' text
// is formatted when the middleware is built), in every header style, for a
// single limit, a Limits of two and plans (issue 24: 3 in the default
// style before, more in the trio styles). As in
// BenchmarkMiddlewareServeHTTP the key is a constant, so that the key
// function's work is not counted: the default key, KeyByIP, costs one more
// (its key string; see TestKeyByIP), which the "nil options" case counts.
func TestMiddlewareAdmittedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random")
	}
	key := func(*http.Request) (string, bool) { return "k", true }
	big := floodgate.Limits{
		floodgate.TokenBucket{Rate: 1 << 40, Per: time.Hour, Burst: 1 << 40},
		floodgate.SlidingWindow{Limit: 1 << 50, Window: time.Minute},
	}
	now := time.Unix(1_700_000_000, 1)
	styles := []struct {
		name string
		opts *httplimit.Options
		want float64
	}{
		{"default style", &httplimit.Options{Key: key}, 2},
		{"draft", &httplimit.Options{Key: key, Style: headers.StyleDraft}, 2},
		{"x", &httplimit.Options{Key: key, Style: headers.StyleX}, 2},
		{"x epoch", &httplimit.Options{Key: key, Style: headers.StyleX, XReset: headers.ResetEpoch, Now: func() time.Time { return now }}, 2},
		{"all", &httplimit.Options{Key: key, Style: headers.StyleIETF | headers.StyleDraft | headers.StyleX}, 2},
		{"shadow", &httplimit.Options{Key: key, Shadow: true}, 2},
		{"omit fields", &httplimit.Options{Key: key, OmitFields: true}, 0},
		{"nil options", nil, 3}, // KeyByIP's key string and the fields
	}
	shapes := []struct {
		name string
		mw   func(t *testing.T, opts *httplimit.Options) func(http.Handler) http.Handler
	}{
		{"single", func(t *testing.T, opts *httplimit.Options) func(http.Handler) http.Handler {
			return newMW(t, newLimiter(t, big[0]), opts)
		}},
		{"composite", func(t *testing.T, opts *httplimit.Options) func(http.Handler) http.Handler {
			return newMW(t, newLimiter(t, big), opts)
		}},
		{"plans", func(t *testing.T, opts *httplimit.Options) func(http.Handler) http.Handler {
			store := newStore(t)
			free, err := floodgate.New(store, freeLimits, nil)
			require.NoError(t, err)
			pro, err := floodgate.New(store, big, nil)
			require.NoError(t, err)
			mw, err := httplimit.NewPlans([]httplimit.Plan{
				{Name: "free", Limiter: free},
				{Name: "pro", Limiter: pro},
			}, byPlanHeader, opts)
			require.NoError(t, err)
			return mw
		}},
	}
	for _, shape := range shapes {
		for _, style := range styles {
			t.Run(shape.name+"/"+style.name, func(t *testing.T) {
				served := 0
				h := shape.mw(t, style.opts)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.RemoteAddr = "192.0.2.1:1234"
				req.Header.Set("X-Plan", "pro")
				w := &discardWriter{h: make(http.Header)}
				h.ServeHTTP(w, req)
				require.Equal(t, 1, served, "the request was not admitted: %v", w.h)
				require.Equal(t, style.want == 0, len(w.h) == 0, "rate-limit fields: %v", w.h)
				allocs := testing.AllocsPerRun(1000, func() {
					clear(w.h)
					h.ServeHTTP(w, req)
				})
				t.Logf("%v allocations per admitted request", allocs)
				assert.LessOrEqual(t, allocs, style.want, "allocations per admitted request")
			})
		}
	}
}
