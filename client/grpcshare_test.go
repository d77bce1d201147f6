package client_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/client"
)

func TestRetryBucket(t *testing.T) {
	b, err := client.NewRetryBucket(client.RetryBudget{})
	require.NoError(t, err)
	assert.Equal(t, 10.0, b.Tokens())
	// Retries are allowed while more than half the bucket is left: 4
	// failures leave 6, the fifth leaves 5, which is not more than half.
	for i := range 4 {
		assert.True(t, b.Failure(), "Failure() #%d", i+1)
	}
	assert.False(t, b.Failure(), "Failure() #5")
	// Each success gives back a tenth: 20 of them take 5 tokens to 7,
	// and a failure then leaves 6, more than half.
	for range 20 {
		b.Success()
	}
	assert.InDelta(t, 7.0, b.Tokens(), 1e-9)
	assert.True(t, b.Failure(), "Failure() after 20 successes")
}

func TestRetryBucketConcurrent(t *testing.T) {
	b, err := client.NewRetryBucket(client.RetryBudget{MaxTokens: 100, TokenRatio: 1})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				b.Failure()
				b.Success()
			}
		})
	}
	wg.Wait()
	assert.GreaterOrEqual(t, b.Tokens(), 0.0)
	assert.LessOrEqual(t, b.Tokens(), 100.0)
}

func TestNewRetryBucketInvalid(t *testing.T) {
	for _, rb := range []client.RetryBudget{
		{MaxTokens: -1}, {MaxTokens: 1001}, {TokenRatio: -0.5}, {TokenRatio: math.NaN()}, {MaxTokens: 1, TokenRatio: 2},
	} {
		b, err := client.NewRetryBucket(rb)
		assert.Error(t, err, "NewRetryBucket(%+v)", rb)
		assert.Nil(t, b)
	}
}

func TestRetryDelay(t *testing.T) {
	const base, maxDelay = 100 * time.Millisecond, 10 * time.Second
	tests := []struct {
		name  string
		retry int
		hint  time.Duration
		u     float64
		want  time.Duration
	}{
		{"no hint, u=0", 0, 0, 0, 0},
		{"no hint, first retry", 0, 0, 0.5, 50 * time.Millisecond},
		{"no hint, third retry", 2, 0, 0.5, 200 * time.Millisecond},
		{"no hint, capped", 20, 0, 0.5, 5 * time.Second},
		{"hint, u=0", 0, 1500 * time.Millisecond, 0, 1500 * time.Millisecond},
		{"hint, spread of 500ms", 0, 1500 * time.Millisecond, 0.5, 1750 * time.Millisecond},
		{"hint, spread of hint/10", 0, 20 * time.Second, 0.5, 21 * time.Second},
		{"u below 0 is 0", 0, time.Second, -3, time.Second},
		{"u NaN is 0", 0, time.Second, math.NaN(), time.Second},
		{"u above 1 is 1", 0, 0, 7, 100 * time.Millisecond},
		{"negative retry is 0", -5, 0, 1, 100 * time.Millisecond},
		{"huge hint saturates", 0, math.MaxInt64 - 1, 1, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := client.RetryDelay(tt.retry, tt.hint, base, maxDelay, tt.u)
			assert.Equal(t, tt.want, got, "RetryDelay(%d, %v, %v)", tt.retry, tt.hint, tt.u)
			assert.GreaterOrEqual(t, got, max(tt.hint, 0))
		})
	}
}
