package client

import (
	"math"
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

func TestHintSpread(t *testing.T) {
	base, maxDelay := 100*time.Millisecond, 10*time.Second
	tests := []struct {
		name  string
		retry int
		hint  time.Duration
		want  time.Duration
	}{
		{"a short hint gets the floor", 0, time.Second, 500 * time.Millisecond},
		{"a long hint gets a tenth of it", 0, 30 * time.Second, 3 * time.Second},
		{"a very long hint is capped at MaxDelay", 0, 5 * time.Minute, 10 * time.Second},
		{"the spread grows with the backoff", 4, time.Second, 1600 * time.Millisecond},
		{"and the backoff is capped too", 20, time.Second, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hintSpread(tt.retry, tt.hint, base, maxDelay)
			assert.Equal(t, tt.want, got, "hintSpread(%d, %v) = %v, want %v", tt.retry, tt.hint, got, tt.want)
		})
	}
	// A MaxDelay below the floor bounds the spread: it is the user's cap
	// on every random wait.
	assert.Equal(t, 10*time.Millisecond, hintSpread(0, time.Second, time.Millisecond, 10*time.Millisecond))
}

// TestRetryDelaySpreadsRetryAfter checks the fix for retries in lockstep:
// clients all told Retry-After: 1 wait at least 1s, never 1.5s or more, and
// not all the same time, over many draws of a seeded source.
func TestRetryDelaySpreadsRetryAfter(t *testing.T) {
	base, maxDelay := 100*time.Millisecond, 10*time.Second
	rng := rand.New(rand.NewPCG(7, 11))
	const draws = 10_000
	hint := time.Second
	seen := make(map[time.Duration]bool)
	var low int // draws in the lower half of [1s, 1.5s)
	for range draws {
		d := retryDelay(0, hint, base, maxDelay, rng.Float64())
		if d < hint || d >= hint+500*time.Millisecond {
			t.Fatalf("retryDelay(0, %v) = %v, outside [1s, 1.5s)", hint, d)
		}
		seen[d] = true
		if d < hint+250*time.Millisecond {
			low++
		}
	}
	assert.Greater(t, len(seen), draws*99/100, "distinct waits among %d draws", draws)
	assert.InDelta(t, 0.5, float64(low)/draws, 0.02, "share of draws in the lower half")

	// u = 0 is the server's wait exactly: never earlier.
	assert.Equal(t, hint, retryDelay(3, hint, base, maxDelay, 0))
}

func TestRetryDelayWithoutHint(t *testing.T) {
	base, maxDelay := 100*time.Millisecond, 10*time.Second
	for retry := range 8 {
		for _, u := range []float64{0, 0.25, 0.999} {
			assert.Equal(t, backoff(retry, base, maxDelay, u), retryDelay(retry, 0, base, maxDelay, u),
				"retryDelay(%d, 0, u=%v) is not the full-jitter backoff", retry, u)
		}
	}
}

func TestRetryDelayNoOverflow(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	got := retryDelay(70, 24*time.Hour, time.Second, huge, 0.999999)
	assert.Equal(t, huge, got, "retryDelay near the int64 limit")
}
