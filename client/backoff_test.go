package client

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffCap(t *testing.T) {
	base, maxDelay := 100*time.Millisecond, 10*time.Second
	tests := []struct {
		retry int
		want  time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{2, 400 * time.Millisecond},
		{6, 6400 * time.Millisecond},
		{7, 10 * time.Second},
		{1000, 10 * time.Second}, // no overflow
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, backoffCap(tt.retry, base, maxDelay), "backoffCap(%d)", tt.retry)
	}
	huge := time.Duration(1<<62 + 1<<61)
	assert.Equal(t, huge, backoffCap(80, time.Second, huge), "backoffCap near the int64 limit")
}

// TestBackoffDistribution checks full jitter: the waits before retry n lie in
// [0, cap_n) and average cap_n/2 (within 5%) over many draws of a seeded
// source.
func TestBackoffDistribution(t *testing.T) {
	base, maxDelay := 100*time.Millisecond, 10*time.Second
	rng := rand.New(rand.NewPCG(7, 11))
	const draws = 100_000
	for retry := range 10 {
		c := backoffCap(retry, base, maxDelay)
		var sum float64
		var low, high int // draws in the lower and upper halves
		for range draws {
			d := backoff(retry, base, maxDelay, rng.Float64())
			if d < 0 || d >= c {
				t.Fatalf("backoff(%d) = %v, outside [0, %v)", retry, d, c)
			}
			sum += float64(d)
			if d < c/2 {
				low++
			} else {
				high++
			}
		}
		mean := time.Duration(sum / draws)
		assert.InDelta(t, float64(c)/2, float64(mean), 0.05*float64(c)/2,
			"retry %d: mean backoff %v, want %v ± 5%%", retry, mean, c/2)
		// Full jitter is uniform, not "cap/2 plus noise": both halves
		// of the range are used alike.
		assert.InDelta(t, 0.5, float64(low)/draws, 0.01, "retry %d: share of draws below cap/2", retry)
		assert.Equal(t, draws, low+high)
	}
}
