package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGradient2(t *testing.T) {
	// The reference publishes no Gradient2 vectors; these follow its
	// formulas by hand: long = mean of the first samples, gradient =
	// clamp(1.5·long/short, 0.5, 1), next = 0.8·L + 0.2·(L·gradient + 4).
	tests := []struct {
		name  string
		opts  *Gradient2Options
		steps []step
	}{
		{"steady latency grows by the queue allowance", nil, []step{
			{rtt: 10 * ms, inflight: 20, want: 20}, // 0.8·20 + 0.2·24 = 20.8
			{rtt: 10 * ms, inflight: 20, want: 21}, // 21.6
			{rtt: 10 * ms, inflight: 20, want: 22}, // 22.4
		}},
		{"tolerance absorbs a mild rise", &Gradient2Options{InitialLimit: 50, MinLimit: 1}, []step{
			{rtt: 10 * ms, inflight: 50, want: 50}, // 50.8
			{rtt: 30 * ms, inflight: 50, want: 51}, // long 20: 1.5·20/30 = 1 → 51.6
			{rtt: 60 * ms, inflight: 50, want: 50}, // long 33.3: gradient 0.833 → 50.68
		}},
		{"gradient floors at one half", &Gradient2Options{InitialLimit: 50, MinLimit: 1}, []step{
			{rtt: 10 * ms, inflight: 50, want: 50},  // 50.8
			{rtt: 10 * ms, inflight: 50, want: 51},  // 51.6
			{rtt: 10 * ms, inflight: 50, want: 52},  // 52.4
			{rtt: 100 * ms, inflight: 50, want: 47}, // gradient 0.4875 → 0.5: 0.8·52.4 + 0.2·30.2 = 47.96
		}},
		{"app-limited holds", &Gradient2Options{InitialLimit: 50, MinLimit: 1}, []step{
			{rtt: 10 * ms, inflight: 24, want: 50}, // 24 < 50/2
			{rtt: 100 * ms, inflight: 24, want: 50},
		}},
		{"drop backs off", &Gradient2Options{InitialLimit: 50, MinLimit: 1}, []step{
			{rtt: 10 * ms, inflight: 50, dropped: true, want: 45}, // the Go port's vector: 50 → 45
			{rtt: 10 * ms, inflight: 1, dropped: true, want: 40},  // 40.5, even when app-limited
		}},
		{"drop storm stops at the minimum", &Gradient2Options{InitialLimit: 30}, []step{
			{rtt: time.Second, dropped: true, want: 27},
			{rtt: time.Second, dropped: true, want: 24},
			{rtt: time.Second, dropped: true, want: 21},
			{rtt: time.Second, dropped: true, want: 20},
			{rtt: time.Second, dropped: true, want: 20},
		}},
		{"backoff ratio one ignores drops", &Gradient2Options{InitialLimit: 50, BackoffRatio: 1}, []step{
			{rtt: 10 * ms, inflight: 50, dropped: true, want: 50},
		}},
		{"zero rtt ignored", nil, []step{
			{rtt: 0, inflight: 20, want: 20},
		}},
		{"clamped to max", &Gradient2Options{InitialLimit: 20, MaxConcurrency: 21, Smoothing: 1}, []step{
			{rtt: 10 * ms, inflight: 20, want: 21},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewGradient2(tc.opts)
			require.NoError(t, err)
			feed(t, g, tc.steps)
		})
	}
}

func TestGradient2LongAverage(t *testing.T) {
	g, err := NewGradient2(nil)
	require.NoError(t, err)
	for range 10 {
		g.Update(Sample{Start: t0, RTT: 100 * ms, InFlight: 20})
	}
	assert.InDelta(t, float64(100*ms), g.long.value, 1e-6, "warm-up is a plain mean")

	// The 11th sample enters the moving average with factor 2/601; the
	// average is then 9.97 times the sample, above 2, so it decays by 5%.
	g.Update(Sample{Start: t0, RTT: 10 * ms, InFlight: 20})
	f := 2.0 / 601
	want := (float64(100*ms)*(1-f) + float64(10*ms)*f) * 0.95
	assert.InDelta(t, want, g.long.value, 1e-3)

	// A dropped sample leaves the average alone.
	g.Update(Sample{Start: t0, RTT: time.Second, InFlight: 20, Dropped: true})
	assert.InDelta(t, want, g.long.value, 1e-3)
}

func TestGradient2Defaults(t *testing.T) {
	g, err := NewGradient2(nil)
	require.NoError(t, err)
	assert.Equal(t, 20, g.Current())
	assert.Equal(t, 20, g.minLimit)
	assert.Equal(t, 200, g.maxLimit)
	assert.Equal(t, 0.2, g.smoothing)
	assert.Equal(t, 4, g.queueSize(1000))
	assert.Equal(t, 600, g.long.window)
	assert.Equal(t, 1.5, g.tolerance)
	assert.Equal(t, 0.9, g.backoff)
}

func TestNewGradient2Invalid(t *testing.T) {
	for name, o := range map[string]Gradient2Options{
		"negative initial":   {InitialLimit: -1},
		"min above initial":  {InitialLimit: 10, MinLimit: 11},
		"initial above max":  {InitialLimit: 10, MaxConcurrency: 9},
		"smoothing above 1":  {Smoothing: 2},
		"tolerance below 1":  {RTTTolerance: 0.5},
		"tolerance infinite": {RTTTolerance: math.Inf(1)},
		"backoff below half": {BackoffRatio: 0.3},
		"negative window":    {LongWindow: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewGradient2(&o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}
