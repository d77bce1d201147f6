package shard_test

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/shard"
)

// t0 is an instant on a whole second, so that epoch-aligned windows of
// whole seconds start there.
var t0 = time.Unix(1_800_000_000, 0)

// TestProbesFillWindows: with K = 16 shards and P = 2 probes, 8
// processes sending 1.2× a fixed window's quota at random instants admit
// at least 0.99·Q in each of 100 windows, and never more than Q. At Q =
// 10,000 every shard is asked for more than its part anyway; at Q = 1,000
// a store that asked only its home shard admitted 983 in a window of this
// run.
func TestProbesFillWindows(t *testing.T) {
	const (
		k, p, procs = 16, 2, 8
		window      = time.Second
		windows     = 100
	)
	for _, quota := range []int64{1_000, 10_000} {
		demand := quota * 12 / 10
		clock := floodgatetest.NewClock(t0)
		inner := newMem(t, clock.Now)
		lims := make([]*floodgate.Limiter, procs)
		for i := range lims {
			lim, err := floodgate.New(newShard(t, inner, shard.Options{Shards: k, Probes: p, Now: clock.Now}),
				floodgate.FixedWindow{Limit: quota, Window: window}, &floodgate.Options{Name: "fill"})
			require.NoError(t, err)
			lims[i] = lim
		}
		rng := rand.New(rand.NewPCG(1, uint64(quota)))
		ctx := context.Background()
		worst := quota
		for w := range windows {
			start := t0.Add(time.Duration(w) * window)
			at := make([]time.Duration, demand)
			for i := range at {
				at[i] = time.Duration(rng.Int64N(int64(window)))
			}
			sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
			var admitted int64
			for _, d := range at {
				clock.Set(start.Add(d))
				dec, err := lims[rng.IntN(procs)].Allow(ctx, "global")
				require.NoError(t, err)
				if dec.Allowed {
					admitted++
				}
			}
			require.LessOrEqual(t, admitted, quota, "Q %d, window %d", quota, w)
			require.GreaterOrEqual(t, admitted, quota*99/100, "Q %d, window %d", quota, w)
			worst = min(worst, admitted)
		}
		t.Logf("Q %d: the fewest admitted in a window: %d", quota, worst)
	}
}

// TestTokenBucketInterval: a sharded token bucket never admits more than
// Burst + Rate·T/Per over any interval of length T, decided through 4
// processes at random instants (every pair of admissions checked).
func TestTokenBucketInterval(t *testing.T) {
	const k, procs = 8, 4
	alg := floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 40}
	clock := floodgatetest.NewClock(t0)
	inner := newMem(t, clock.Now)
	lims := make([]*floodgate.Limiter, procs)
	for i := range lims {
		lim, err := floodgate.New(newShard(t, inner, shard.Options{Shards: k, Probes: 3, Now: clock.Now}), alg, &floodgate.Options{Name: "tb"})
		require.NoError(t, err)
		lims[i] = lim
	}
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	type adm struct {
		at time.Time
		n  int64
	}
	var log []adm
	now := t0
	for range 6000 {
		// Bursts at one instant, and gaps from 0 to 50 ms.
		if rng.IntN(3) > 0 {
			now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
			clock.Set(now)
		}
		n := 1 + rng.Int64N(alg.Burst/k)
		d, err := lims[rng.IntN(procs)].AllowN(ctx, "k", n)
		require.NoError(t, err)
		if d.Allowed {
			log = append(log, adm{now, n})
		}
	}
	require.NotEmpty(t, log)
	for i := range log {
		var sum int64
		for j := i; j < len(log); j++ {
			sum += log[j].n
			span := log[j].at.Sub(log[i].at)
			bound := alg.Burst + int64(span)*alg.Rate/int64(alg.Per)
			if sum > bound {
				t.Fatalf("admitted %d in [%v, %v], more than %d", sum, log[i].at.Sub(t0), log[j].at.Sub(t0), bound)
			}
		}
	}
}

// TestRetryAfter: with every shard probed, a denial's RetryAfter is the
// soonest any shard admits the request: one nanosecond earlier every
// shard still denies it, at RetryAfter one admits it. Shards of a token
// bucket split unevenly (rates 4 and 3) refill at different instants.
func TestRetryAfter(t *testing.T) {
	const k = 4
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 14, Per: time.Second, Burst: 14},
		floodgate.FixedWindow{Limit: 14, Window: time.Second},
		floodgate.SlidingWindow{Limit: 14, Window: time.Second},
		floodgate.SlidingLog{Limit: 14, Window: time.Second},
	} {
		clock := floodgatetest.NewClock(t0.Add(123 * time.Millisecond))
		lim, err := floodgate.New(newShard(t, newMem(t, clock.Now), shard.Options{Shards: k, Probes: k - 1, Now: clock.Now}), alg, nil)
		require.NoError(t, err)
		ctx := context.Background()
		for round := range 5 {
			var d floodgate.Decision
			for {
				d, err = lim.Allow(ctx, "k")
				require.NoError(t, err)
				if !d.Allowed {
					break
				}
				clock.Advance(7 * time.Millisecond)
			}
			require.Equal(t, int64(14), d.Limit)
			require.Positive(t, d.RetryAfter)
			at := clock.Now()
			clock.Set(at.Add(d.RetryAfter - 1))
			early, err := lim.Allow(ctx, "k")
			require.NoError(t, err)
			require.False(t, early.Allowed, "%v round %d: admitted 1 ns before RetryAfter %v", alg, round, d.RetryAfter)
			clock.Set(at.Add(d.RetryAfter))
			ok, err := lim.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, ok.Allowed, "%v round %d: denied at RetryAfter %v: %+v", alg, round, d.RetryAfter, ok)
		}
	}
}
