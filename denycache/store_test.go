package denycache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/denycache"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/testkit"
	"github.com/floodgate-go/floodgate/memstore"
)

var t0 = time.Unix(1_800_000_000, 0)

func newMem(t testing.TB, now func() time.Time) *memstore.Store { return testkit.Mem(t, now) }

func newCache(t testing.TB, inner floodgate.Store, now func() time.Time) *denycache.Store {
	t.Helper()
	s, err := denycache.New(inner, &denycache.Options{Now: now})
	require.NoError(t, err)
	return s
}

// TestConformance runs floodgatetest's conservative tier on deny caches
// over one memstore. (A cached denial keeps the Remaining of the
// store's, which a bucket refilling below n may have raised: not the
// exact tier.)
func TestConformance(t *testing.T) {
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newCache(t, newMem(t, now), now)
	}, &floodgatetest.Options{
		Conservative: true,
		Fleet: func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
			inner := newMem(t, now)
			ss := make([]floodgate.Store, n)
			for i := range ss {
				ss[i] = newCache(t, inner, now)
			}
			return ss
		},
	})
}

// TestNeverDeniesWhatTheStoreAdmits runs random traces through a deny
// cache over one memstore and, step by step, the same requests on a
// second memstore without a cache, on one virtual clock: takes of random
// sizes, takes up to n, reservations, check-only calls, settlements that
// charge and that give back, on three keys, at instants that stay, move
// a little and jump past windows. The cache must decide every request as
// the uncached store does (so the two states stay equal), and answer its
// cached denials with the same RetryAfter.
func TestNeverDeniesWhatTheStoreAdmits(t *testing.T) {
	algs := []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 8},
		floodgate.LeakyBucket{Rate: 5, Per: time.Second, Capacity: 8},
		floodgate.FixedWindow{Limit: 8, Window: time.Second},
		floodgate.SlidingWindow{Limit: 8, Window: time.Second},
		floodgate.SlidingLog{Limit: 8, Window: time.Second},
		floodgate.Limits{floodgate.FixedWindow{Limit: 6, Window: time.Second}, floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 8}},
	}
	ctx := context.Background()
	var answered, total int
	for _, alg := range algs {
		for seed := range uint64(40) {
			clock := floodgatetest.NewClock(t0)
			calls := &testkit.Counting{Store: newMem(t, clock.Now)}
			cached, err := floodgate.New(newCache(t, calls, clock.Now), alg, &floodgate.Options{Name: "x"})
			require.NoError(t, err)
			plain, err := floodgate.New(newMem(t, clock.Now), alg, &floodgate.Options{Name: "x"})
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(seed, 7))
			quota := alg.Policy().Quota
			_, leaky := alg.(floodgate.LeakyBucket)
			var admittedAt []time.Time
			for step := range 300 {
				switch rng.IntN(10) {
				case 0, 1, 2, 3:
				case 4:
					clock.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))))
				default:
					clock.Advance(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
				}
				key := fmt.Sprint("k", rng.IntN(3))
				req := floodgate.Request{Op: floodgate.OpTake, N: 1 + rng.Int64N(quota)}
				switch rng.IntN(10) {
				case 0:
					req.Op = floodgate.OpTakeUpTo
				case 1:
					req.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
				case 2:
					req.Check = true
				case 3, 4:
					if len(admittedAt) > 0 && !leaky {
						req = floodgate.Request{Op: floodgate.OpSettle, N: 1 + rng.Int64N(3), At: admittedAt[rng.IntN(len(admittedAt))]}
						if rng.IntN(3) > 0 {
							req.N = -req.N // a give-back
						}
					}
				}
				before := calls.Calls.Load()
				var ec, ep [2]floodgate.Decision
				var got, want floodgate.Result
				var gerr, werr error
				if rng.IntN(2) == 0 && req.Op == floodgate.OpTake && req.MaxDelay == 0 && !req.Check {
					got.Decision, gerr = cached.AllowN(ctx, key, req.N)
					want.Decision, werr = plain.AllowN(ctx, key, req.N)
				} else {
					got, gerr = cached.Apply(ctx, key, req, ec[:])
					want, werr = plain.Apply(ctx, key, req, ep[:])
				}
				require.Equal(t, werr == nil, gerr == nil, "%v seed %d step %d %+v: %v, %v", alg, seed, step, req, gerr, werr)
				what := fmt.Sprintf("%v seed %d step %d %s %+v", alg, seed, step, key, req)
				require.Equal(t, want.Allowed, got.Allowed, "%s: cached %+v, store %+v", what, got.Decision, want.Decision)
				require.Equal(t, want.Granted, got.Granted, what)
				if !got.Allowed && req.Op != floodgate.OpSettle {
					require.Equal(t, want.RetryAfter, got.RetryAfter, "%s: cached %+v, store %+v", what, got.Decision, want.Decision)
				}
				if calls.Calls.Load() == before && req.Op != floodgate.OpSettle {
					answered++
				}
				total++
				if want.Allowed && req.Op != floodgate.OpSettle && !req.Check {
					admittedAt = append(admittedAt, want.At.Add(want.Delay))
				}
			}
		}
	}
	t.Logf("%d of %d requests answered from the cache", answered, total)
	require.Positive(t, answered)
}

// TestOneCallPerRetryAfter: a spent key, asked 10,000 times on a frozen
// clock, costs one store call after its denial; once RetryAfter has
// passed, one more.
func TestOneCallPerRetryAfter(t *testing.T) {
	clock := floodgatetest.NewClock(t0.Add(250 * time.Millisecond))
	calls := &testkit.Counting{Store: newMem(t, clock.Now)}
	lim, err := floodgate.New(newCache(t, calls, clock.Now), floodgate.FixedWindow{Limit: 3, Window: time.Second}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	var d floodgate.Decision
	for range 4 {
		d, err = lim.Allow(ctx, "abuser")
		require.NoError(t, err)
	}
	require.False(t, d.Allowed)
	require.Equal(t, 750*time.Millisecond, d.RetryAfter)
	require.Equal(t, int64(4), calls.Calls.Load())
	for i := range 10_000 {
		clock.Advance(50 * time.Microsecond) // 500 ms in all
		d, err = lim.Allow(ctx, "abuser")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 750*time.Millisecond-time.Duration(i+1)*50*time.Microsecond, d.RetryAfter)
	}
	require.Equal(t, int64(4), calls.Calls.Load())
	clock.Advance(250 * time.Millisecond)
	d, err = lim.Allow(ctx, "abuser")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(5), calls.Calls.Load())
}

// TestPerLimiter: a denial is never answered for another limiter, nor
// for one built anew with a higher quota (envoyproxy/ratelimit #1077),
// though they share the name and so the store's state.
func TestPerLimiter(t *testing.T) {
	clock := floodgatetest.NewClock(t0)
	s := newCache(t, newMem(t, clock.Now), clock.Now)
	low, err := floodgate.New(s, floodgate.FixedWindow{Limit: 1, Window: time.Minute}, &floodgate.Options{Name: "tenant"})
	require.NoError(t, err)
	ctx := context.Background()
	d, err := low.Allow(ctx, "acme")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = low.Allow(ctx, "acme")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	high, err := floodgate.New(s, floodgate.FixedWindow{Limit: 100, Window: time.Minute}, &floodgate.Options{Name: "tenant"})
	require.NoError(t, err)
	d, err = high.Allow(ctx, "acme")
	require.NoError(t, err)
	require.True(t, d.Allowed, "the raised quota admits: %+v", d)
	other, err := floodgate.New(s, floodgate.FixedWindow{Limit: 1, Window: time.Minute}, &floodgate.Options{Name: "other"})
	require.NoError(t, err)
	d, err = other.Allow(ctx, "acme")
	require.NoError(t, err)
	require.True(t, d.Allowed)
}

// TestGiveBack: a give-back through the cache drops the key's denial.
func TestGiveBack(t *testing.T) {
	clock := floodgatetest.NewClock(t0)
	lim, err := floodgate.New(newCache(t, newMem(t, clock.Now), clock.Now), floodgate.FixedWindow{Limit: 2, Window: time.Minute}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	var first floodgate.Result
	for i := range 3 {
		res, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
		require.NoError(t, err)
		require.Equal(t, i < 2, res.Allowed)
		if i == 0 {
			first = res
		}
	}
	res, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -1, At: first.At}, nil)
	require.NoError(t, err)
	require.NotZero(t, res.Granted)
	d, err := lim.Allow(ctx, "k")
	require.NoError(t, err)
	require.True(t, d.Allowed, "after a give-back: %+v", d)
}

// TestErrors: bad input gets the store's typed error, never a cached
// denial.
func TestErrors(t *testing.T) {
	_, err := denycache.New(nil, nil)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = denycache.New(newMem(t, nil), &denycache.Options{MaxKeys: -1})
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	lim, err := floodgate.New(newCache(t, newMem(t, nil), nil), floodgate.FixedWindow{Limit: 2, Window: time.Minute}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	for range 3 {
		_, err = lim.Allow(ctx, "k")
		require.NoError(t, err)
	}
	_, err = lim.AllowN(ctx, "k", 3)
	require.ErrorIs(t, err, floodgate.ErrExceedsLimit)
	_, err = lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 0}, nil)
	require.ErrorIs(t, err, floodgate.ErrInvalidN)
	_, err = lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, MaxDelay: -1}, nil)
	require.ErrorIs(t, err, floodgate.ErrInvalidDelay)
}
