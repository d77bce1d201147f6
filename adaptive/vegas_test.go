package adaptive

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func constant(n int) func(int) int { return func(int) int { return n } }

// half returns the jitter draw that makes the probe period exactly
// 0.75·ProbeMultiplier·limit samples.
func half() float64 { return 0.5 }

func TestVegasGoldenVectors(t *testing.T) {
	// The vectors of Netflix concurrency-limits' VegasLimitTest.
	small := func() *VegasOptions {
		return &VegasOptions{Alpha: constant(3), Beta: constant(6), Smoothing: 1, InitialLimit: 10, MaxConcurrency: 20, Rand: half}
	}
	tests := []struct {
		name  string
		opts  *VegasOptions
		steps []step
	}{
		{"increase", small(), []step{
			{rtt: 10 * ms, inflight: 10, want: 10}, // sets rtt_noload
			{rtt: 10 * ms, inflight: 11, want: 16}, // queue 0 <= threshold 1: +beta
		}},
		{"decrease", small(), []step{
			{rtt: 10 * ms, inflight: 10, want: 10},
			{rtt: 50 * ms, inflight: 11, want: 9}, // queue ceil(10·0.8) = 8 > beta 6: -lg(10)
		}},
		{"no change", small(), []step{
			{rtt: 10 * ms, inflight: 10, want: 10},
			{rtt: 14 * ms, inflight: 14, want: 10}, // queue ceil(2.86) = 3: within [alpha, beta]
		}},
		{"large limit", &VegasOptions{InitialLimit: 10000, MaxConcurrency: 20000, Rand: half}, []step{
			{rtt: 10 * time.Second, inflight: 5000, want: 10000},
			{rtt: 10 * time.Second, inflight: 6000, want: 10024}, // +beta = 6·lg(10000) = 24
		}},
		{"decrease function with smoothing", &VegasOptions{
			Decrease: func(l float64) float64 { return l / 2 }, Smoothing: 0.5, InitialLimit: 100, MaxConcurrency: 200, Rand: half,
		}, []step{
			{rtt: 10 * ms, inflight: 100, want: 100},
			{rtt: 20 * ms, inflight: 100, want: 75}, // 0.5·100 + 0.5·50
			{rtt: 20 * ms, inflight: 100, want: 56}, // 0.5·75 + 0.5·37.5 = 56.25
		}},
		{"decrease function without smoothing", &VegasOptions{
			Decrease: func(l float64) float64 { return l / 2 }, InitialLimit: 100, MaxConcurrency: 200, Rand: half,
		}, []step{
			{rtt: 10 * ms, inflight: 100, want: 100},
			{rtt: 20 * ms, inflight: 100, want: 50},
			{rtt: 20 * ms, inflight: 100, want: 25},
		}},
	}
	// They hold for the reference's lowest-sample baseline and for the
	// default smoothed one, which follows the reference until
	// BaselineSamples samples have arrived (each vector is shorter).
	for _, baseline := range []int{1, 0} {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/baseline=%d", tc.name, baseline), func(t *testing.T) {
				o := *tc.opts
				o.BaselineSamples = baseline
				v, err := NewVegas(&o)
				require.NoError(t, err)
				feed(t, v, tc.steps)
			})
		}
	}
}

func TestVegasSmoothedBaseline(t *testing.T) {
	// Samples of 8ms and 12ms alternate around a no-load RTT of 10ms. The
	// reference measures queues against the lowest sample, 8ms, and reads
	// a 12ms sample as a queue of a third of the limit; with
	// BaselineSamples 4 the baseline is their mean once four have
	// arrived, and 12ms and 13ms are within the band.
	for _, tc := range []struct {
		name     string
		baseline int
		steps    []step
	}{
		{"reference", 1, []step{
			{rtt: 8 * ms, inflight: 20, want: 20},  // sets the baseline
			{rtt: 12 * ms, inflight: 20, want: 19}, // queue ceil(20·(1-8/12)) = 7 > 6
			{rtt: 8 * ms, inflight: 20, want: 25},  // queue 0: +beta
			{rtt: 12 * ms, inflight: 20, want: 24}, // queue ceil(25/3) = 9
			{rtt: 13 * ms, inflight: 20, want: 23}, // queue ceil(24·5/13) = 10
		}},
		{"smoothed", 4, []step{
			{rtt: 8 * ms, inflight: 20, want: 20},  // warm-up: the lowest sample, as the reference
			{rtt: 12 * ms, inflight: 20, want: 19}, // against 8ms
			{rtt: 8 * ms, inflight: 20, want: 25},  // against 8ms: queue 0
			{rtt: 12 * ms, inflight: 20, want: 25}, // the mean of four, 10ms: queue ceil(25/6) = 5
			{rtt: 13 * ms, inflight: 20, want: 25}, // average 11.2ms, lowest 10ms: queue ceil(25·3/13) = 6
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVegas(&VegasOptions{BaselineSamples: tc.baseline, Rand: half})
			require.NoError(t, err)
			feed(t, v, tc.steps)
		})
	}

	t.Run("a faster sample is a sample without a queue", func(t *testing.T) {
		// Against the smoothed baseline, a sample below it grows the limit
		// (the reference's rule, that a new lowest sample only moves the
		// baseline, keeps the limit at 20 here).
		v, err := NewVegas(&VegasOptions{BaselineSamples: 2, Rand: half})
		require.NoError(t, err)
		feed(t, v, []step{
			{rtt: 10 * ms, inflight: 1, want: 20},
			{rtt: 10 * ms, inflight: 1, want: 20}, // app-limited: no change
			{rtt: 9 * ms, inflight: 20, want: 26}, // faster than the 10ms before it: queue <= 0, +beta
		})
		assert.InDelta(t, float64(28*ms)/3, v.baseline(), 1, "the average fell to 9.33ms")
	})

	t.Run("probe", func(t *testing.T) {
		// A probe replaces the lowest average by the current average, so
		// that the baseline can rise after a real shift.
		v, err := NewVegas(&VegasOptions{BaselineSamples: 2, ProbeMultiplier: 1, Rand: half})
		require.NoError(t, err)
		steps := []step{{rtt: 10 * ms, inflight: 1, want: 20}, {rtt: 10 * ms, inflight: 1, want: 20}}
		for range 12 {
			steps = append(steps, step{rtt: 20 * ms, inflight: 1, want: 20}) // app-limited
		}
		feed(t, v, steps)
		assert.Equal(t, float64(10*ms), v.baseline(), "the lowest average before the probe")
		feed(t, v, []step{{rtt: 20 * ms, inflight: 1, want: 20}}) // the 15th sample probes
		assert.InDelta(t, float64(20*ms), v.baseline(), float64(ms)/1000, "the average at the probe")
	})
}

func TestVegasRules(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"app-limited does not grow", []step{
			{rtt: 10 * ms, inflight: 20, want: 20},
			{rtt: 10 * ms, inflight: 9, want: 20}, // 2·9 < 20
			{rtt: 10 * ms, inflight: 10, want: 26},
		}},
		{"drop decreases even when app-limited", []step{
			{rtt: 10 * ms, inflight: 20, want: 20},
			{rtt: 10 * ms, inflight: 1, dropped: true, want: 19},
		}},
		{"queue below alpha increases by lg", []step{
			{rtt: 10 * ms, inflight: 20, want: 20},
			{rtt: 11 * ms, inflight: 20, want: 21}, // queue ceil(20/11) = 2: above threshold, below alpha
		}},
		{"lower rtt resets the baseline without a change", []step{
			{rtt: 20 * ms, inflight: 20, want: 20},
			{rtt: 10 * ms, inflight: 20, want: 20},
			{rtt: 40 * ms, inflight: 20, want: 19}, // queue 10 > 6
		}},
		{"zero rtt ignored", []step{
			{rtt: 0, inflight: 20, want: 20},
			{rtt: 10 * ms, inflight: 20, want: 20},
			{rtt: 0, inflight: 20, want: 20},
			{rtt: 10 * ms, inflight: 20, want: 26},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVegas(&VegasOptions{Rand: half})
			require.NoError(t, err)
			feed(t, v, tc.steps)
		})
	}
}

func TestVegasProbeResetsNoLoadRTT(t *testing.T) {
	// With jitter 0.5+0.5/2 = 0.75 and ProbeMultiplier 1 at limit 20, the
	// 15th sample probes: it replaces rtt_noload (10ms) by its own RTT
	// (14ms), so the 16th sample sees no queue and grows the limit.
	draws := 0
	v, err := NewVegas(&VegasOptions{ProbeMultiplier: 1, Rand: func() float64 { draws++; return 0.5 }})
	require.NoError(t, err)
	steps := []step{{rtt: 10 * ms, inflight: 20, want: 20}}
	for range 14 {
		steps = append(steps, step{rtt: 14 * ms, inflight: 20, want: 20}) // queue 6: hold
	}
	steps = append(steps, step{rtt: 14 * ms, inflight: 20, want: 26})
	feed(t, v, steps)
	assert.Equal(t, 2, draws, "jitter draws: one at construction, one per probe")
}

func TestVegasClampsToMaxConcurrency(t *testing.T) {
	v, err := NewVegas(&VegasOptions{InitialLimit: 18, MaxConcurrency: 20, Rand: half})
	require.NoError(t, err)
	feed(t, v, []step{
		{rtt: 10 * ms, inflight: 18, want: 18},
		{rtt: 10 * ms, inflight: 18, want: 20},
	})
}

func TestVegasDefaults(t *testing.T) {
	v, err := NewVegas(nil)
	require.NoError(t, err)
	assert.Equal(t, 20, v.Current())
	assert.Equal(t, 1000, v.maxLimit)
	assert.Equal(t, 1.0, v.smoothing)
	assert.Equal(t, 30, v.probeMultiplier)
	assert.Equal(t, 20, v.baselineN)
	for _, l := range []int{10, 150, 5000} {
		assert.Equalf(t, 3*lg(l), v.alpha(l), "alpha(%d)", l)
		assert.Equalf(t, 6*lg(l), v.beta(l), "beta(%d)", l)
		assert.Equalf(t, lg(l), v.threshold(l), "threshold(%d)", l)
	}
	assert.Equal(t, 11.0, v.increase(10))
	assert.Equal(t, 148.0, v.decrease(150))
	assert.GreaterOrEqual(t, v.probeJitter, 0.5)
	assert.Less(t, v.probeJitter, 1.0)
}

func TestNewVegasInvalid(t *testing.T) {
	for name, o := range map[string]VegasOptions{
		"negative initial":    {InitialLimit: -1},
		"negative max":        {MaxConcurrency: -1},
		"initial above max":   {InitialLimit: 30, MaxConcurrency: 20},
		"smoothing above one": {Smoothing: 1.5},
		"negative smoothing":  {Smoothing: -0.1},
		"NaN smoothing":       {Smoothing: math.NaN()},
		"negative probe":      {ProbeMultiplier: -1},
		"negative baseline":   {BaselineSamples: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewVegas(&o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}
