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
// the same instant, on each algorithm: the check reports the Result the
// step then has, and leaves the key as it was, byte for byte, its TTL
// too.
func TestCheckChangesNothing(t *testing.T) {
	parallelOnMiniredis(t)
	c, clock, s := virtualStore(t, Options{})
	ctx := context.Background()
	all := []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 3},
		floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 4},
		floodgate.FixedWindow{Limit: 5, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 6, Window: time.Hour},
		floodgate.SlidingLog{Limit: 2, Window: time.Minute},
	}
	for _, alg := range all {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			key := fmt.Sprint(alg)
			keys := []string{s.Key(key, kindOf(alg))}
			clock.Set(t0)
			first, err := s.Apply(ctx, key, alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
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
				check := req
				check.Check = true
				want, err := s.Apply(ctx, key, alg, check)
				require.NoError(t, err, "check %+v", req)
				before.same(t, c, "%v: check %+v", alg, req)
				got, err := s.Apply(ctx, key, alg, req)
				require.NoError(t, err, "%+v", req)
				require.Equal(t, norm(got), norm(want), "%v: check %+v", alg, req)
			}
		})
	}
}
