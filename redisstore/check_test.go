package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// virtualStore returns a store on a clock of the test's, which also moves
// miniredis' TTLs, and its client.
func virtualStore(t *testing.T, opts Options) (*redis.Client, *floodgatetest.Clock, *Store) {
	t.Helper()
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	opts.Now = srv.clock(clock)
	if opts.ExpiryMargin == 0 {
		// On a real Redis the TTLs run on the wall clock, not the test's.
		opts.ExpiryMargin = time.Minute
	}
	return c, clock, newStore(t, c, &opts)
}

// snapshot is what rawKey reads of each of keys.
type snapshot struct {
	keys []string
	raw  []string
	ttl  []time.Duration
}

func snap(t *testing.T, c redis.UniversalClient, keys []string) snapshot {
	t.Helper()
	s := snapshot{keys: keys, raw: make([]string, len(keys)), ttl: make([]time.Duration, len(keys))}
	for i, k := range keys {
		s.raw[i], s.ttl[i] = rawKey(t, c, k)
	}
	return s
}

// same checks that every key of s is as it was.
func (s snapshot) same(t *testing.T, c redis.UniversalClient, format string, args ...any) {
	t.Helper()
	for i, k := range s.keys {
		unchanged(t, c, k, s.raw[i], s.ttl[i], format, args...)
	}
}

// TestCheckChangesNothing makes each step check-only and then for real, at
// the same instant, on each algorithm alone and on a Limits of them all:
// the check reports the Result the step then has (and every limit's
// Decision), and leaves every key as it was, byte for byte, its TTL too. A
// reservation's check on the Limits needs its limits to take the units at a
// later instant, where the sliding log's entry taken first has left the
// window; the log must keep it: the take after the check is denied.
func TestCheckChangesNothing(t *testing.T) {
	parallelOnMiniredis(t)
	c, clock, s := virtualStore(t, Options{})
	ctx := context.Background()
	all := floodgate.Limits{
		floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 3},
		floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 4},
		floodgate.FixedWindow{Limit: 5, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 6, Window: time.Hour},
		floodgate.SlidingLog{Limit: 2, Window: time.Minute},
	}
	algs := []floodgate.Algorithm{all}
	algs = append(algs, all...)
	for _, alg := range algs {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			key := fmt.Sprint(alg)
			ls, isLimits := alg.(floodgate.Limits)
			var keys []string
			if isLimits {
				keys = limitKeys(s, key, ls)
			} else {
				keys, ls = []string{s.Key(testName, key, kindOf(alg))}, floodgate.Limits{alg}
			}
			clock.Set(t0)
			first, err := applyOnce(ctx, s, key, alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
			require.NoError(t, err)
			require.True(t, first.Allowed)
			clock.Advance(30 * time.Second)
			at := first.At.Add(first.Delay)
			for i, req := range []floodgate.Request{
				{Op: floodgate.OpTake, N: 1},
				{Op: floodgate.OpTake, N: 1, MaxDelay: time.Hour},
				{Op: floodgate.OpTakeUpTo, N: 9},
				{Op: floodgate.OpSettle, N: -1, At: at},
				{Op: floodgate.OpSettle, N: 2, At: at},
				{Op: floodgate.OpTake, N: 2, MaxDelay: time.Hour},
				{Op: floodgate.OpSettle, N: 1, At: at},
			} {
				if i == 1 {
					clock.Advance(time.Second)
				}
				before := snap(t, c, keys)
				checked, real := make([]floodgate.Decision, len(ls)), make([]floodgate.Decision, len(ls))
				check := req
				check.Check = true
				want, err := applyEach(ctx, s, key, alg, check, checked)
				require.NoError(t, err, "check %+v", req)
				before.same(t, c, "%v: check %+v", alg, req)
				if i == 1 && isLimits {
					// The reservation's limits take at now + Delay, where
					// the log's first entry has left: it is still in the
					// window now.
					require.Positive(t, want.Delay)
					res, err := applyOnce(ctx, s, key, alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
					require.NoError(t, err)
					require.False(t, res.Allowed, "the check dropped an entry still in the window")
					before.same(t, c, "%v: a denial", alg)
				}
				got, err := applyEach(ctx, s, key, alg, req, real)
				require.NoError(t, err, "%+v", req)
				require.Equal(t, norm(got), norm(want), "%v: check %+v", alg, req)
				if isLimits {
					require.Equal(t, real, checked, "%v: check %+v: Each", alg, req)
				}
			}
		})
	}
}

// TestCheckSettlementOutOfWindow settles, check-only and then for real,
// units of an entry that has left a sliding log's window but is still in
// its key (nothing has dropped it: a check drops nothing): the check finds
// nothing to settle, as the step does, alone and in a Limits.
func TestCheckSettlementOutOfWindow(t *testing.T) {
	parallelOnMiniredis(t)
	_, clock, s := virtualStore(t, Options{})
	ctx := context.Background()
	sl := floodgate.SlidingLog{Limit: 5, Window: time.Second}
	for _, alg := range []floodgate.Algorithm{sl, floodgate.Limits{sl, floodgate.FixedWindow{Limit: 100, Window: time.Hour}}} {
		key := fmt.Sprint(alg)
		clock.Set(t0)
		first, err := applyOnce(ctx, s, key, alg, floodgate.Request{Op: floodgate.OpTake, N: 2})
		require.NoError(t, err)
		clock.Advance(500 * time.Millisecond)
		_, err = applyOnce(ctx, s, key, alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
		require.NoError(t, err)
		clock.Advance(700 * time.Millisecond) // the first entry has left
		for _, n := range []int64{-1, 1, -1} {
			req := floodgate.Request{Op: floodgate.OpSettle, N: n, At: first.At}
			check := req
			check.Check = true
			want, err := applyOnce(ctx, s, key, alg, check)
			require.NoError(t, err, "check %+v", req)
			got, err := applyOnce(ctx, s, key, alg, req)
			require.NoError(t, err, "%+v", req)
			require.Equal(t, norm(got), norm(want), "%v: check %+v", alg, req)
			require.Zero(t, got.Granted, "%v: %+v settled units of an entry out of the window", alg, req)
		}
	}
}
