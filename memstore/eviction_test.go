package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestKeyRotationForgivesNoSpentKey is the eviction bar: with MaxKeys
// 2,000, a key-rotation attack of 10×MaxKeys new keys, each used once,
// leaves every fully spent key spent, for every algorithm. Eviction
// prefers the entries that remember the least (the attacker's, each one
// unit) to the spent ones; it used to prefer the soonest restored, which
// at MaxKeys 10,000 forgave every spent window key after 11,000 new keys.
func TestKeyRotationForgivesNoSpentKey(t *testing.T) {
	const maxKeys, spent, rotated = 2_000, 20, 10 * 2_000
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 10, Per: time.Hour, Burst: 10},
		floodgate.LeakyBucket{Rate: 10, Per: time.Hour, Capacity: 10},
		floodgate.FixedWindow{Limit: 10, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 10, Window: time.Hour},
		floodgate.SlidingLog{Limit: 10, Window: time.Hour},
	} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, MaxKeys: maxKeys})
			lim, err := floodgate.New(s, alg, testOpts)
			require.NoError(t, err)
			ctx := context.Background()
			// Spend the victims first, as an attacker would before rotating:
			// the oldest entries, which a policy by age or by restoration
			// would pick first.
			for i := range spent {
				key := fmt.Sprintf("victim:%d", i)
				d, err := lim.Reserve(ctx, key, 10, time.Hour)
				require.NoError(t, err)
				require.True(t, d.Allowed, "spending %s", key)
			}
			for i := range rotated {
				// Time moves, but far less than any window: nothing is
				// restored by the clock.
				clock.Advance(time.Microsecond)
				_, err := lim.Allow(ctx, fmt.Sprintf("rotate:%d", i))
				require.NoError(t, err)
			}
			require.LessOrEqual(t, s.Len(), maxKeys)
			forgiven := 0
			for i := range spent {
				d, err := lim.Allow(ctx, fmt.Sprintf("victim:%d", i))
				require.NoError(t, err)
				if d.Allowed {
					forgiven++
				}
			}
			require.Zero(t, forgiven, "spent keys given a fresh quota after %d new keys", rotated)
		})
	}
}

// TestFixedWindowMovesUnderContention: two fixed windows with different
// packings hammer one key on a frozen clock, so the key's word moves under
// its mutex while other goroutines compare-and-swap on it. The instant
// starts a window of both (1 s and 2 s), so neither resets the other's
// count: sharing one state, they admit exactly Limit units together.
func TestFixedWindowMovesUnderContention(t *testing.T) {
	for round := range 20 {
		clock := floodgatetest.NewClock(t0.Add(time.Duration(round) * 2 * time.Second))
		s := newMemStore(t, &memstore.Options{Now: clock.Now})
		a, err := floodgate.New(s, floodgate.FixedWindow{Limit: 100, Window: time.Second}, testOpts)
		require.NoError(t, err)
		b, err := floodgate.New(s, floodgate.FixedWindow{Limit: 100, Window: 2 * time.Second}, testOpts)
		require.NoError(t, err)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			lim := a
			if g%2 == 1 {
				lim = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					d, err := lim.Allow(context.Background(), "hot")
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 100, admitted.Load(), "round %d: admitted by two configurations sharing one key", round)
	}
}
