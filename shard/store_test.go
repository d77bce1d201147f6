package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/testkit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/shard"
)

// newMem returns a memstore on now (its own clock when nil).
func newMem(t testing.TB, now func() time.Time) *memstore.Store { return testkit.Mem(t, now) }

// newShard returns a shard Store over inner.
func newShard(t testing.TB, inner floodgate.Store, o shard.Options) *shard.Store {
	t.Helper()
	s, err := shard.New(inner, &o)
	require.NoError(t, err)
	return s
}

// TestConformance runs floodgatetest's conservative tier on shard Stores
// over one memstore: with every shard probed, a take of one unit is
// denied no earlier than the reference would deny it.
func TestConformance(t *testing.T) {
	const k = 4
	opts := func(now func() time.Time) shard.Options {
		return shard.Options{Shards: k, Probes: k - 1, Now: now}
	}
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newShard(t, newMem(t, now), opts(now))
	}, &floodgatetest.Options{
		Conservative: true,
		MaxTake:      func(alg floodgate.Algorithm) int64 { return smallestShard(alg, k) },
		Skip: func(alg floodgate.Algorithm) string {
			ls, ok := alg.(floodgate.Limits)
			if !ok {
				ls = floodgate.Limits{alg}
			}
			for _, l := range ls {
				if _, ok := l.(floodgate.LeakyBucket); ok {
					return "a sharded leaky bucket lets a unit of each shard's queue depart at once (see the package doc)"
				}
			}
			return ""
		},
		Fleet: func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
			inner := newMem(t, now)
			ss := make([]floodgate.Store, n)
			for i := range ss {
				ss[i] = newShard(t, inner, opts(now))
			}
			return ss
		},
	})
}

// smallestShard returns the quota of alg's smallest shard over k: the
// largest take a sharded store admits.
func smallestShard(alg floodgate.Algorithm, k int) int64 {
	if ls, ok := alg.(floodgate.Limits); ok {
		q := ls[0].Policy().Quota / int64(k)
		for _, l := range ls[1:] {
			q = min(q, l.Policy().Quota/int64(k))
		}
		return q
	}
	return alg.Policy().Quota / int64(k)
}

// TestSplitExact: the shards' quotas sum to the limit's, for every
// algorithm, and a saturated limit with every shard probed admits exactly
// its quota, through 8 shard Stores × 64 goroutines over one memstore.
func TestSplitExact(t *testing.T) {
	algs := []floodgate.Algorithm{
		floodgate.FixedWindow{Limit: 1000, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 1003, Window: time.Hour},
		floodgate.SlidingLog{Limit: 999, Window: time.Hour},
		floodgate.TokenBucket{Rate: 64, Per: time.Hour, Burst: 1001},
		floodgate.LeakyBucket{Rate: 64, Per: time.Hour, Capacity: 1001},
		floodgate.Limits{floodgate.FixedWindow{Limit: 1000, Window: time.Hour}, floodgate.TokenBucket{Rate: 64, Per: time.Hour, Burst: 2000}},
	}
	for _, alg := range algs {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			for _, k := range []int{2, 3, 16} {
				frozen := time.Unix(1_800_000_000, 0)
				now := func() time.Time { return frozen }
				inner := newMem(t, now)
				const stores, goroutines = 8, 64
				var admitted, denied atomic.Int64
				var wg sync.WaitGroup
				for range stores {
					s := newShard(t, inner, shard.Options{Shards: k, Probes: k - 1, Now: now})
					lim, err := floodgate.New(s, alg, &floodgate.Options{Name: "exact"})
					require.NoError(t, err)
					for range goroutines {
						wg.Go(func() {
							for range 40 {
								d, err := lim.Allow(context.Background(), "global")
								if err != nil {
									t.Error(err)
									return
								}
								if d.Allowed {
									admitted.Add(1)
								} else {
									denied.Add(1)
								}
							}
						})
					}
				}
				wg.Wait()
				quota := alg.Policy().Quota
				if _, ok := alg.(floodgate.LeakyBucket); ok {
					// On a frozen clock each shard's queue admits one
					// unit without delay.
					quota = int64(k)
				}
				require.Equal(t, quota, admitted.Load(), "k=%d: admitted", k)
				require.Equal(t, int64(stores*goroutines*40)-quota, denied.Load(), "k=%d: denied", k)
			}
		})
	}
}

// TestCalls counts the inner store's steps: one when the home shard
// admits, at most 1+Probes on a denial, and under sustained saturation
// (a fixed window spent for the rest of its window, 10,000 decisions a
// millisecond apart, so that the hints end every MaxHint) at most 1.2 per
// decision on average, thanks to the hints.
func TestCalls(t *testing.T) {
	const k, p = 16, 2
	clock := floodgatetest.NewClock(t0)
	now := clock.Now
	c := &testkit.Counting{Store: newMem(t, now)}
	s := newShard(t, c, shard.Options{Shards: k, Probes: p, Now: now})
	lim, err := floodgate.New(s, floodgate.FixedWindow{Limit: 1600, Window: time.Hour}, &floodgate.Options{Name: "calls"})
	require.NoError(t, err)
	ctx := context.Background()
	var admitted int64
	for range 800 {
		before := c.Calls.Load()
		d, err := lim.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, int64(1), c.Calls.Load()-before, "an admission by the home shard")
		admitted++
		// Remaining is the admitting shard's: never more than the limit
		// has left.
		require.LessOrEqual(t, d.Remaining, 1600-admitted)
		require.Equal(t, int64(1600), d.Limit)
	}
	// Saturate: 10,000 more decisions.
	before := c.Calls.Load()
	const more = 10_000
	for range more {
		clock.Advance(time.Millisecond)
		b := c.Calls.Load()
		d, err := lim.Allow(ctx, "k")
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
		require.LessOrEqual(t, c.Calls.Load()-b, int64(1+p))
	}
	calls := c.Calls.Load() - before
	require.LessOrEqual(t, float64(calls)/more, 1.2, "calls per decision under saturation")
	require.LessOrEqual(t, admitted, int64(1600))
	t.Logf("admitted %d of 1600; %d calls for %d decisions under saturation", admitted, calls, more)
}

// TestErrors: bad input gets a typed error.
func TestErrors(t *testing.T) {
	mem := newMem(t, nil)
	for _, o := range []shard.Options{{Shards: 1}, {Shards: -1}, {Shards: shard.MaxShards + 1}, {Shards: 4, Probes: 4}, {Probes: -1}, {MaxKeys: -1}, {Ledger: -1}, {Ledger: 1<<16 + 1}, {MaxHint: -1}} {
		_, err := shard.New(mem, &o)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%+v", o)
	}
	_, err := shard.New(nil, nil)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)

	s := newShard(t, mem, shard.Options{Shards: 16})
	for _, alg := range []floodgate.Algorithm{
		floodgate.FixedWindow{Limit: 15, Window: time.Second},
		floodgate.TokenBucket{Rate: 15, Per: time.Second, Burst: 100},
		floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 15},
		floodgate.Limits{floodgate.FixedWindow{Limit: 100, Window: time.Second}, floodgate.SlidingLog{Limit: 3, Window: time.Second}},
	} {
		_, err := floodgate.New(s, alg, nil)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%v", alg)
	}
	lim, err := floodgate.New(s, floodgate.FixedWindow{Limit: 100, Window: time.Second}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.AllowN(ctx, "k", 101) // more than the whole quota
	require.ErrorIs(t, err, floodgate.ErrExceedsLimit)
	d, err := lim.AllowN(ctx, "k", 6)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(100), d.Limit)
	res, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -1, At: time.Now()}, nil)
	require.NoError(t, err, "units admitted by AllowN are not in the ledger, and go back to the shards in turn")
	require.Equal(t, int64(1), res.Granted)
	res, err = lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: 2, At: time.Now()}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Granted)
	long := make([]byte, floodgate.MaxKeyLen)
	for i := range long {
		long[i] = 'x'
	}
	_, err = lim.Allow(ctx, string(long))
	require.ErrorIs(t, err, floodgate.ErrKeyTooLong)
	_, err = lim.Allow(ctx, "")
	require.ErrorIs(t, err, floodgate.ErrEmptyKey)
}

// TestGiveBack: units are given back to the shards that admitted them
// when the Store's ledger holds them, else to the shards in turn; 3 Stores
// over one memstore, each giving back units any of them admitted, never
// hold more than the quota net of what they gave back, every unit still
// counted comes back when asked, and a spent limit admits again exactly
// the units given back.
func TestGiveBack(t *testing.T) {
	clock := floodgatetest.NewClock(t0.Add(123 * time.Millisecond))
	now := clock.Now
	inner := newMem(t, now)
	alg := floodgate.FixedWindow{Limit: 40, Window: time.Hour}
	const k = 8
	lims := make([]*floodgate.Limiter, 3)
	for i := range lims {
		lim, err := floodgate.New(newShard(t, inner, shard.Options{Shards: k, Probes: k - 1, Ledger: 8, Now: now}), alg, &floodgate.Options{Name: "gb"})
		require.NoError(t, err)
		lims[i] = lim
	}
	ctx := context.Background()
	type held struct {
		lim int
		at  time.Time
		n   int64
	}
	var holds []held
	var net int64
	rng := rand.New(rand.NewPCG(5, 6))
	for step := range 3000 {
		i := rng.IntN(len(lims))
		if step%50 == 49 {
			// Saturate: every shard asked, so what is free is taken,
			// once the hints of the shards other Stores gave units back
			// to have ended.
			clock.Advance(shard.DefaultMaxHint)
			for {
				res, err := lims[i].Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
				require.NoError(t, err)
				if !res.Allowed {
					break
				}
				net++
				holds = append(holds, held{i, res.At.Add(res.Delay), 1})
			}
			require.Equal(t, alg.Limit, net, "step %d: a saturated limit holds its quota, net of give-backs", step)
		}
		if rng.IntN(3) > 0 || len(holds) == 0 {
			n := 1 + rng.Int64N(5)
			res, err := lims[i].Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
			require.NoError(t, err)
			if res.Allowed {
				net += res.Granted
				holds = append(holds, held{i, res.At.Add(res.Delay), res.Granted})
			}
		} else {
			j := rng.IntN(len(holds))
			h := holds[j]
			n := 1 + rng.Int64N(h.n+2) // sometimes more than was admitted
			// Given back through the Store that admitted the units, or
			// through another (whose ledger does not hold them).
			by := h.lim
			if rng.IntN(2) == 0 {
				by = rng.IntN(len(lims))
			}
			res, err := lims[by].Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -n, At: h.at}, nil)
			require.NoError(t, err, "step %d", step)
			require.LessOrEqual(t, res.Granted, n)
			if n <= h.n {
				require.Equal(t, n, res.Granted, "step %d: units admitted and not given back are counted, and all %d come back", step, n)
			}
			net -= res.Granted
			holds[j].n -= min(res.Granted, h.n)
			if holds[j].n <= 0 {
				holds = append(holds[:j], holds[j+1:]...)
			}
		}
		require.LessOrEqual(t, net, alg.Limit, "step %d: held net of give-backs", step)
		require.GreaterOrEqual(t, net, int64(0), "step %d", step)
	}
	// A store's own admissions given back are admitted again.
	lim := lims[0]
	for {
		d, err := lim.Allow(ctx, "spent")
		require.NoError(t, err)
		if !d.Allowed {
			break
		}
	}
	res, err := lim.Apply(ctx, "spent", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	// Units admitted by Allow (Take) are not in the ledger: the shards
	// take them back in turn, and they are admitted again.
	res, err = lim.Apply(ctx, "spent", floodgate.Request{Op: floodgate.OpSettle, N: -2, At: clock.Now()}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Granted)
	for range 2 {
		d, err := lim.Allow(ctx, "spent")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := lim.Allow(ctx, "spent")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	lim2 := lims[1]
	_, err = lim2.Apply(ctx, "fresh", floodgate.Request{Op: floodgate.OpTake, N: 3}, nil)
	require.NoError(t, err)
	for {
		d, err := lim2.Allow(ctx, "fresh")
		require.NoError(t, err)
		if !d.Allowed {
			break
		}
	}
	res, err = lim2.Apply(ctx, "fresh", floodgate.Request{Op: floodgate.OpSettle, N: -3, At: clock.Now()}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Granted)
	for range 3 {
		d, err := lim2.AllowN(ctx, "fresh", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err = lim2.Allow(ctx, "fresh")
	require.NoError(t, err)
	require.False(t, d.Allowed)
}

// TestSpread: a take of more units than a shard holds is taken from
// several shards, all or nothing: a denial leaves every shard as it was
// (the same units are admitted afterwards), the units can be given back,
// and concurrent spread takes from 3 Stores never admit more than the
// quota.
func TestSpread(t *testing.T) {
	clock := floodgatetest.NewClock(t0)
	mem := newMem(t, clock.Now)
	alg := floodgate.FixedWindow{Limit: 100, Window: time.Hour}
	lim, err := floodgate.New(newShard(t, mem, shard.Options{Shards: 4, Probes: 3}), alg, &floodgate.Options{Name: "spread"})
	require.NoError(t, err)
	ctx := context.Background()
	take := func(n int64) floodgate.Result {
		t.Helper()
		res, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
		require.NoError(t, err)
		return res
	}
	r := take(60) // a shard holds 25
	require.True(t, r.Allowed)
	require.Equal(t, int64(60), r.Granted)
	require.True(t, r.Remaining > 0 && r.Remaining <= 40, "Remaining %d, a lower bound of the 40 left", r.Remaining)
	check, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 40, Check: true}, nil)
	require.NoError(t, err)
	require.True(t, check.Allowed, "a check of the 40 left")
	d := take(50)
	require.False(t, d.Allowed)
	require.Equal(t, int64(40), d.Remaining, "the units left, the denied take's given back")
	require.True(t, take(40).Allowed, "the denial left every shard as it was")
	require.False(t, take(1).Allowed)
	back, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -60, At: r.At}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(60), back.Granted)
	require.True(t, take(60).Allowed, "the units given back")

	// Three processes' Stores over one memstore, 16 goroutines each,
	// takes of 30 and 7 units, until each has been denied 8 times.
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for p := range 3 {
		l, err := floodgate.New(newShard(t, mem, shard.Options{Shards: 4, Probes: 3}), alg, &floodgate.Options{Name: "spread"})
		require.NoError(t, err)
		for g := range 16 {
			wg.Go(func() {
				n := int64(30)
				if (p+g)%2 == 1 {
					n = 7
				}
				for misses := 0; misses < 8; {
					d, err := l.AllowN(ctx, "c", n)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(n)
					} else {
						misses++
					}
				}
			})
		}
	}
	wg.Wait()
	require.LessOrEqual(t, admitted.Load(), int64(100), "units admitted of a quota of 100")
	require.GreaterOrEqual(t, admitted.Load(), int64(70), "units admitted of a quota of 100")
	t.Logf("concurrent spread takes admitted %d units of 100", admitted.Load())
}
