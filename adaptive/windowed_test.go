package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a Limit that records the samples it gets and returns scripted
// limits (or its current one once the script runs out).
type recorder struct {
	limit   int
	script  []int
	samples []Sample
}

func (r *recorder) Current() int { return r.limit }

func (r *recorder) Update(s Sample) int {
	r.samples = append(r.samples, s)
	if len(r.script) > 0 {
		r.limit, r.script = r.script[0], r.script[1:]
	}
	return r.limit
}

// at is a sample that ends at t0+end after rtt.
func at(end, rtt time.Duration, inflight int, dropped bool) Sample {
	return Sample{Start: t0.Add(end - rtt), RTT: rtt, InFlight: inflight, Dropped: dropped}
}

func TestWindowedAverage(t *testing.T) {
	rec := &recorder{limit: 10, script: []int{11, 12}}
	w, err := NewWindowed(rec, &WindowedOptions{MinWindow: 100 * ms, MaxWindow: time.Second, MinSamples: 3})
	require.NoError(t, err)

	steps := []struct {
		s    Sample
		want int
	}{
		// The first sample closes the empty start window: 1 sample < 3, so
		// it is discarded, and the next window ends at 1s + clamp(2·10ms,
		// 100ms, 1s) = 1.1s.
		{at(time.Second, 10*ms, 1, false), 10},
		{at(1050*ms, 10*ms, 4, false), 10},
		{at(1080*ms, 20*ms, 2, true), 10},
		{at(1100*ms, 30*ms, 3, false), 10}, // not after 1.1s: same window
		// Ends the window of 4 samples: average 17.5ms floored, max
		// in-flight 4, one drop. Next window: 1.15s + clamp(2·10ms) = 1.25s.
		{at(1150*ms, 10*ms, 1, false), 11},
		{at(1200*ms, 50*ms, 1, false), 11},
		{at(1300*ms, 50*ms, 1, false), 11}, // 2 samples < 3: discarded
		{at(1310*ms, 50*ms, 1, false), 11},
		{at(1320*ms, 50*ms, 1, false), 11},
	}
	for i, st := range steps {
		got := w.Update(st.s)
		require.Equalf(t, st.want, got, "step %d: Update(%+v) = %d, want %d", i, st.s, got, st.want)
	}
	require.Len(t, rec.samples, 1)
	assert.Equal(t, Sample{Start: t0.Add(1140 * ms), RTT: 17500 * time.Microsecond, InFlight: 4, Dropped: true}, rec.samples[0])

	// The window after the discarded one started at 1.3s and lasts
	// clamp(2·50ms) = 100ms; 1.41s ends it with 3 samples.
	assert.Equal(t, 12, w.Update(at(1410*ms, 50*ms, 7, false)))
	require.Len(t, rec.samples, 2)
	assert.Equal(t, Sample{Start: t0.Add(1360 * ms), RTT: 50 * ms, InFlight: 7}, rec.samples[1])
}

func TestWindowedWindowLength(t *testing.T) {
	// The window is 2·min RTT of the previous window, within [Min, Max].
	for _, tc := range []struct {
		rtt, want time.Duration
	}{
		{10 * ms, 100 * ms}, // 20ms raised to MinWindow
		{200 * ms, 400 * ms},
		{2 * time.Second, time.Second}, // 4s lowered to MaxWindow
	} {
		rec := &recorder{limit: 1}
		w, err := NewWindowed(rec, &WindowedOptions{MinWindow: 100 * ms, MaxWindow: time.Second, MinSamples: 1})
		require.NoError(t, err)
		w.Update(at(time.Second, tc.rtt, 1, false))
		assert.Equalf(t, t0.Add(time.Second+tc.want), w.nextUpdate, "window after RTT %v", tc.rtt)
	}
}

func TestWindowedMinRTT(t *testing.T) {
	rec := &recorder{limit: 1}
	w, err := NewWindowed(rec, &WindowedOptions{MinSamples: 1})
	require.NoError(t, err)
	w.Update(at(time.Second, 99*time.Microsecond, 1, false))
	assert.Empty(t, rec.samples, "a sample under 100µs is discarded")
	w.Update(at(time.Second, 100*time.Microsecond, 1, false))
	assert.Len(t, rec.samples, 1)
}

func TestWindowedPercentile(t *testing.T) {
	// ImmutablePercentileSampleWindowTest: p50 of {5000, 500, 10} is 500,
	// and p99.9 of three samples is the largest. A tiny p takes the
	// smallest rather than index -1.
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{0.5, 500 * ms},
		{0.999, 5000 * ms},
		{0.01, 10 * ms},
	} {
		rec := &recorder{limit: 1}
		w, err := NewWindowed(rec, &WindowedOptions{MinSamples: 3, Percentile: tc.p})
		require.NoError(t, err)
		w.Update(at(0, 1*ms, 1, false)) // closes the start window
		w.Update(at(100*ms, 5000*ms, 1, false))
		w.Update(at(200*ms, 500*ms, 1, false))
		w.Update(at(2*time.Second, 10*ms, 1, false))
		require.Lenf(t, rec.samples, 1, "p%v", tc.p)
		assert.Equalf(t, tc.want, rec.samples[0].RTT, "p%v", tc.p)
	}
}

func TestWindowedPercentileCapacity(t *testing.T) {
	// Past MaxSamples, RTTs are not ranked but the samples still count, and
	// their in-flight and drop flags still reach the delegate.
	rec := &recorder{limit: 1}
	w, err := NewWindowed(rec, &WindowedOptions{MinSamples: 4, Percentile: 0.99, MaxSamples: 2})
	require.NoError(t, err)
	w.Update(at(0, 1*ms, 1, false))
	w.Update(at(100*ms, 10*ms, 1, false))
	w.Update(at(200*ms, 20*ms, 1, false))
	w.Update(at(300*ms, 900*ms, 9, true))
	w.Update(at(2*time.Second, 900*ms, 1, false))
	require.Len(t, rec.samples, 1)
	assert.Equal(t, Sample{Start: t0.Add(1100 * ms), RTT: 20 * ms, InFlight: 9, Dropped: true}, rec.samples[0])
}

func TestWindowedAllocs(t *testing.T) {
	v, err := NewVegas(&VegasOptions{Rand: half})
	require.NoError(t, err)
	w, err := NewWindowed(v, &WindowedOptions{Percentile: 0.9, MinSamples: 1, MinWindow: ms, MaxWindow: ms})
	require.NoError(t, err)
	end := time.Duration(0)
	allocs := testing.AllocsPerRun(1000, func() {
		end += ms
		w.Update(at(end, 10*ms, 20, false))
	})
	assert.Zero(t, allocs)
}

func TestNewWindowedInvalid(t *testing.T) {
	f, err := NewFixed(1)
	require.NoError(t, err)
	_, err = NewWindowed(nil, nil)
	assert.ErrorIs(t, err, ErrInvalidOption, "nil delegate")
	for name, o := range map[string]WindowedOptions{
		"negative min window": {MinWindow: -1},
		"max below min":       {MinWindow: 2 * time.Second, MaxWindow: time.Second},
		"negative samples":    {MinSamples: -1},
		"negative min RTT":    {MinRTT: -1},
		"percentile one":      {Percentile: 1},
		"negative percentile": {Percentile: -0.5},
		"negative capacity":   {MaxSamples: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewWindowed(f, &o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}
