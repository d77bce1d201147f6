package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// TestSlidingWindowFlatEstimate: with a huge Limit and Prev = 1 the
// estimate barely moves across the window; finding the instant it has room
// must bisect, not step a nanosecond at a time (~2^40 steps here).
func TestSlidingWindowFlatEstimate(t *testing.T) {
	w := floodgate.MaxWindow.Truncate(time.Microsecond)
	a := floodgate.SlidingWindow{Limit: 1 << 40, Window: w}
	start := time.Unix(0, 0).Add(3 * w)
	st := step.SlidingWindowState{Start: start.UnixNano(), Prev: 1, Curr: 1<<40 - 1}
	_, res, err := step.SlidingWindow(a, st, start, floodgate.Request{Op: floodgate.OpTake, N: 1})
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	// One unit fits only once the previous window's single unit has no
	// weight left: at the end of the window.
	assert.Equal(t, w, res.RetryAfter, "RetryAfter")
}

// TestTakeUpToOverLoweredLimit: a live key whose count exceeds a lowered
// Limit grants nothing, and reports no negative Remaining.
func TestTakeUpToOverLoweredLimit(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	upTo := floodgate.Request{Op: floodgate.OpTakeUpTo, N: 3}

	fw := floodgate.FixedWindow{Limit: 5, Window: time.Minute}
	_, res, err := step.FixedWindow(fw, step.FixedWindowState{Start: now.UnixNano(), Count: 10}, now, upTo)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "FixedWindow AllowUpTo over a lowered limit")
	assert.Zero(t, res.Granted)
	assert.Zero(t, res.Remaining)

	sl := floodgate.SlidingLog{Limit: 5, Window: time.Minute}
	var log step.SlidingLogState
	big := floodgate.SlidingLog{Limit: 10, Window: time.Minute}
	_, err = step.SlidingLog(big, &log, now, floodgate.Request{Op: floodgate.OpTake, N: 10})
	require.NoError(t, err)
	res, err = step.SlidingLog(sl, &log, now, upTo)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "SlidingLog AllowUpTo over a lowered limit")
	assert.Zero(t, res.Granted)
	assert.Zero(t, res.Remaining)
}

// TestWaitWithoutDeadlineOnFullQueue: a leaky bucket whose queue is full
// cannot admit a Wait; without a deadline the error must not claim one.
func TestWaitWithoutDeadlineOnFullQueue(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(&memstore.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	lim, err := floodgate.New(s, floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 1}, nil)
	require.NoError(t, err)
	d, err := lim.Allow(context.Background(), "k")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	err = lim.Wait(context.Background(), "k", 1)
	assert.ErrorIs(t, err, floodgate.ErrWaitExceedsDeadline)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Wait without a deadline")

	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	err = lim.Wait(ctx, "k", 1)
	assert.ErrorIs(t, err, floodgate.ErrWaitExceedsDeadline)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Wait with a deadline")
}

// TestNewPointerConfigs: pointers to the configurations implement Algorithm
// too; New accepts them on every store and rejects nil ones without a panic.
func TestNewPointerConfigs(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	lim, err := floodgate.New(s, &floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2}, nil)
	require.NoError(t, err)
	d, err := lim.AllowN(context.Background(), "k", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	for _, alg := range []floodgate.Algorithm{(*floodgate.TokenBucket)(nil), (*floodgate.LeakyBucket)(nil),
		(*floodgate.FixedWindow)(nil), (*floodgate.SlidingWindow)(nil), (*floodgate.SlidingLog)(nil)} {
		_, err := floodgate.New(s, alg, nil)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "New(%T(nil))", alg)
	}
}
