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
)

// heapPerKey returns the heap bytes per tracked key after the keys "user:0"
// to "user:<n-1>" made one decision each with alg, measured after GC. The
// caller's key strings are not counted; the store's copies are.
func heapPerKey(t testing.TB, alg floodgate.Algorithm, n int) float64 {
	t.Helper()
	ctx := context.Background()
	clock := time.Unix(1_700_000_000, 0)
	s, err := memstore.New(&memstore.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, k := range keys {
		_, err := applyOnce(ctx, s, k, alg, floodgate.Request{N: 1})
		require.NoError(t, err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Equal(t, n, s.Len())
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
}

// TestHeapPerKey is the always-on guard against a per-key memory
// regression: 20,000 keys per algorithm (a fraction of a second, under the
// race detector too), each held to a bound about a quarter above the figure
// measured at that size (Go 1.26, amd64: 51 to 55 B for the buckets, 77 B
// for the fixed window, whose entry also carries its packing and a pointer
// for a state moved under a mutex, 93 to 95 B for the sliding window, 173
// to 175 B for a sliding log of one entry, 149 B for a sliding window of 4
// sub-windows and 381 B of 60). The buckets' bound fails on 16 B
// more per key, what a Go map's slot costs over the table's.
//
// The figures the README quotes come from a million keys per algorithm,
// held to tighter bounds, in the bench module:
//
//	cd bench && go test -run '^TestMemoryPerKey$' -v .
func TestHeapPerKey(t *testing.T) {
	const n = 20_000
	for _, c := range []struct {
		name  string
		alg   floodgate.Algorithm
		bound float64 // bytes per key
	}{
		{"TokenBucket", floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 100}, 68},
		{"LeakyBucket", floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 100}, 68},
		{"FixedWindow", floodgate.FixedWindow{Limit: 100, Window: time.Minute}, 96},
		{"SlidingWindow", floodgate.SlidingWindow{Limit: 100, Window: time.Minute}, 120},
		{"SlidingLog", floodgate.SlidingLog{Limit: 100, Window: time.Minute}, 220},
		// Sub-windows: a 96-byte entry (with its 48-byte state header), S+1
		// counts of 4 bytes in a slice of their own (its size class), the
		// key and the table's slot: 149 B at S = 4, 381 B at S = 60, under
		// the 8·S + 64 = 544 B asked at S = 60. Counts move to 8 bytes only
		// for a key whose total might pass 2^32 − 1 (TestSubWindowsWide).
		{"SubWindows/4", floodgate.SlidingWindow{Limit: 100, Window: time.Minute, SubWindows: 4}, 190},
		{"SubWindows/60", floodgate.SlidingWindow{Limit: 100, Window: time.Minute, SubWindows: 60}, 8*60 + 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			per := heapPerKey(t, c.alg, n)
			t.Logf("%v: %.1f bytes per key (%d keys)", c.alg, per, n)
			if per > c.bound {
				t.Errorf("%v: %.1f bytes per key (%d keys), want at most %.0f", c.alg, per, n, c.bound)
			}
		})
	}
}
