package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestKeyRotationForgivesNoSpentKey is the eviction bar: with MaxKeys
// 10,000, a key-rotation attack of 10×MaxKeys new keys, each used once,
// leaves every fully spent key spent, for every algorithm. Eviction
// prefers the entries that remember the least (the attacker's, each one
// unit) to the spent ones; it used to prefer the soonest restored, which
// forgave all 20 spent window keys after 11,000 new keys.
func TestKeyRotationForgivesNoSpentKey(t *testing.T) {
	const maxKeys, spent, rotated = 10_000, 20, 10 * 10_000
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 10, Per: time.Hour, Burst: 10},
		floodgate.LeakyBucket{Rate: 10, Per: time.Hour, Capacity: 10},
		floodgate.FixedWindow{Limit: 10, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 10, Window: time.Hour},
		floodgate.SlidingLog{Limit: 10, Window: time.Hour},
	} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := conformance.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, MaxKeys: maxKeys})
			lim, err := floodgate.New(s, alg)
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
