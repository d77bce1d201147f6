package memstore_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// heapPerKey returns the heap bytes per tracked key after n short keys made
// one decision each with alg, measured after GC.
func heapPerKey(t testing.TB, alg floodgate.Algorithm, n int) float64 {
	t.Helper()
	ctx := context.Background()
	clock := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(&memstore.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, k := range keys {
		_, err := s.Apply(ctx, k, alg, floodgate.Request{N: 1})
		require.NoError(t, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Equal(t, n, s.Len())
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

func TestHeapPerKey(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a million keys: skipped with -short and under the race detector, which inflates the heap and the time")
	}
	n := 1_000_000
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 100},
		floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 100},
		floodgate.FixedWindow{Limit: 100, Window: time.Minute},
		floodgate.SlidingWindow{Limit: 100, Window: time.Minute},
		floodgate.SlidingLog{Limit: 100, Window: time.Minute},
	} {
		per := heapPerKey(t, alg, n)
		t.Logf("%v: %.1f bytes per key (%d keys)", alg, per, n)
		if kindOf(alg) == step.KindTokenBucket {
			require.LessOrEqual(t, per, 64.0, "token bucket heap per key")
		}
	}
}
