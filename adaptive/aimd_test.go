package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAIMD(t *testing.T) {
	tests := []struct {
		name  string
		opts  *AIMDOptions
		steps []step
	}{
		// The first three are Netflix concurrency-limits' AIMDLimitTest.
		{"increase on success", &AIMDOptions{InitialLimit: 20}, []step{
			{rtt: time.Millisecond, inflight: 10, want: 21},
		}},
		{"decrease on drop", &AIMDOptions{InitialLimit: 30}, []step{
			{rtt: time.Millisecond, inflight: 30, dropped: true, want: 27},
		}},
		{"stays at max", &AIMDOptions{InitialLimit: 21, MaxLimit: 21}, []step{
			{rtt: time.Millisecond, inflight: 21, want: 21},
		}},
		{"app-limited does not grow", nil, []step{
			{rtt: time.Millisecond, inflight: 9, want: 20}, // 2·9 < 20
			{rtt: time.Millisecond, inflight: 10, want: 21},
		}},
		{"timeout counts as drop", &AIMDOptions{InitialLimit: 100}, []step{
			{rtt: 5 * time.Second, inflight: 100, want: 101}, // not above the timeout
			{rtt: 5*time.Second + 1, inflight: 100, want: 90},
		}},
		{"floor at min limit", &AIMDOptions{InitialLimit: 22}, []step{
			{rtt: time.Millisecond, dropped: true, want: 20}, // floor(19.8) clamped to 20
			{rtt: time.Millisecond, dropped: true, want: 20},
		}},
		{"custom ratio and bounds", &AIMDOptions{InitialLimit: 10, MinLimit: 2, MaxLimit: 11, BackoffRatio: 0.5}, []step{
			{rtt: time.Millisecond, dropped: true, want: 5},
			{rtt: time.Millisecond, dropped: true, want: 2},
			{rtt: time.Millisecond, dropped: true, want: 2},
			{rtt: time.Millisecond, inflight: 1, want: 3},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAIMD(tc.opts)
			require.NoError(t, err)
			feed(t, a, tc.steps)
		})
	}
}

func TestAIMDDefaults(t *testing.T) {
	a, err := NewAIMD(nil)
	require.NoError(t, err)
	assert.Equal(t, AIMD{limit: 20, min: 20, max: 200, backoff: 0.9, timeout: 5 * time.Second}, *a)

	a, err = NewAIMD(&AIMDOptions{InitialLimit: 5})
	require.NoError(t, err)
	assert.Equal(t, 5, a.min, "MinLimit follows a lower InitialLimit")
	a, err = NewAIMD(&AIMDOptions{InitialLimit: 500})
	require.NoError(t, err)
	assert.Equal(t, 500, a.max, "MaxLimit follows a higher InitialLimit")
}

func TestNewAIMDInvalid(t *testing.T) {
	for name, o := range map[string]AIMDOptions{
		"negative initial":  {InitialLimit: -1},
		"min above initial": {InitialLimit: 10, MinLimit: 11},
		"initial above max": {InitialLimit: 10, MaxLimit: 9},
		"ratio below half":  {BackoffRatio: 0.4},
		"ratio one":         {BackoffRatio: 1},
		"ratio NaN":         {BackoffRatio: math.NaN()},
		"negative timeout":  {Timeout: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewAIMD(&o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}
