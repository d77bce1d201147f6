package client

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestThrottleProbability(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	th, err := newThrottle(ThrottleOptions{})
	require.NoError(t, err)
	assert.Equal(t, 2.0, th.k)
	assert.Equal(t, 5*time.Second, th.bucket)

	// 10 requests, 2 accepted: (10 − 2·2) / (10 + 1).
	for i := range 10 {
		tk, p, ok := th.admit(t0, 0.999)
		require.True(t, ok, "request %d rejected with p = %v", i, p)
		th.done(tk, i < 2, false)
	}
	assert.InDelta(t, 6.0/11, th.rejectProbability(t0), 1e-12)

	// A cancelled request is forgotten.
	tk, _, _ := th.admit(t0, 0.999)
	th.done(tk, false, true)
	assert.InDelta(t, 6.0/11, th.rejectProbability(t0), 1e-12)

	// A locally rejected request still counts as a request.
	_, p, ok := th.admit(t0, 0)
	assert.False(t, ok)
	assert.InDelta(t, 6.0/11, p, 1e-12, "the probability the rejection used")
	assert.InDelta(t, 7.0/12, th.rejectProbability(t0), 1e-12)

	// Counts slide out of the window.
	assert.InDelta(t, 7.0/12, th.rejectProbability(t0.Add(2*time.Minute-5*time.Second)), 1e-12)
	assert.Equal(t, 0.0, th.rejectProbability(t0.Add(2*time.Minute)))

	// Healthy traffic is never rejected.
	th, _ = newThrottle(ThrottleOptions{})
	for range 1000 {
		tk, p, ok := th.admit(t0, 0)
		require.True(t, ok, "healthy traffic rejected with p = %v", p)
		th.done(tk, true, false)
	}
}

func TestThrottleClockBackwards(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	th, err := newThrottle(ThrottleOptions{K: 1, Window: 24 * time.Second})
	require.NoError(t, err)
	for range 5 {
		tk, _, _ := th.admit(t0, 0.999)
		th.done(tk, false, false)
	}
	// A clock stepping back must not wipe the newer counts.
	tk, _, _ := th.admit(t0.Add(-20*time.Second), 0.999)
	th.done(tk, false, false)
	assert.InDelta(t, 6.0/7, th.rejectProbability(t0), 1e-12)
}

func TestThrottleOptionsValidation(t *testing.T) {
	for _, o := range []ThrottleOptions{
		{K: 0.5}, {K: -1}, {K: math.NaN()}, {K: math.Inf(1)}, {Window: -time.Second}, {Window: 10},
	} {
		_, err := newThrottle(o)
		assert.Error(t, err, "newThrottle(%+v)", o)
	}
}
