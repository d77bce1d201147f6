package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
)

// discardWriter is a ResponseWriter that keeps nothing but its header, which
// the benchmark clears between requests, so that only the middleware's
// allocations are counted.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkMiddlewareServeHTTP measures one admitted request through the
// middleware on memstore, with the IETF fields: a single limit, and a
// Limits of two, whose fields list both, alone and as one of two plans
// chosen per request; and the single limit in the other header styles.
// The key is a constant so that the key function's work is not counted.
func BenchmarkMiddlewareServeHTTP(b *testing.B) {
	algs := []struct {
		name string
		alg  floodgate.Algorithm
	}{
		{"single", floodgate.TokenBucket{Rate: 1 << 40, Per: time.Hour, Burst: 1 << 40}},
		{"composite", floodgate.Limits{
			floodgate.TokenBucket{Rate: 1 << 40, Per: time.Hour, Burst: 1 << 40},
			floodgate.SlidingWindow{Limit: 1 << 50, Window: time.Minute},
		}},
	}
	key := func(*http.Request) (string, bool) { return "k", true }
	run := func(b *testing.B, mw func(http.Handler) http.Handler) {
		h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Plan", "pro")
		w := &discardWriter{h: make(http.Header)}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	}
	for _, a := range algs {
		b.Run(a.name, func(b *testing.B) {
			lim, err := floodgate.New(newStore(b), a.alg, nil)
			require.NoError(b, err)
			mw, err := httplimit.New(lim, &httplimit.Options{Key: key})
			require.NoError(b, err)
			run(b, mw)
		})
	}
	// The single limit again, in the other header styles.
	for _, st := range []struct {
		name string
		opts httplimit.Options
	}{
		{"draft", httplimit.Options{Style: headers.StyleDraft}},
		{"x", httplimit.Options{Style: headers.StyleX}},
		{"x-epoch", httplimit.Options{Style: headers.StyleX, XReset: headers.ResetEpoch}},
		{"all", httplimit.Options{Style: headers.StyleIETF | headers.StyleDraft | headers.StyleX}},
	} {
		b.Run("styles/"+st.name, func(b *testing.B) {
			lim, err := floodgate.New(newStore(b), algs[0].alg, nil)
			require.NoError(b, err)
			opts := st.opts
			opts.Key = key
			mw, err := httplimit.New(lim, &opts)
			require.NoError(b, err)
			run(b, mw)
		})
	}
	// The composite again, chosen per request among two plans.
	b.Run("plans", func(b *testing.B) {
		store := newStore(b)
		free, err := floodgate.New(store, freeLimits, nil)
		require.NoError(b, err)
		pro, err := floodgate.New(store, algs[1].alg, nil)
		require.NoError(b, err)
		mw, err := httplimit.NewPlans([]httplimit.Plan{
			{Name: "free", Limiter: free},
			{Name: "pro", Limiter: pro},
		}, byPlanHeader, &httplimit.Options{Key: key})
		require.NoError(b, err)
		run(b, mw)
	})
}
