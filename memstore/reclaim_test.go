package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// reclaimAlgorithms refill within 2 ms of a one-unit spend (the sliding
// window counter, the slowest, is restored two windows after its count).
var reclaimAlgorithms = []floodgate.Algorithm{
	floodgate.TokenBucket{Rate: 10, Per: ms, Burst: 10},
	floodgate.LeakyBucket{Rate: 10, Per: ms, Capacity: 10},
	floodgate.FixedWindow{Limit: 10, Window: ms},
	floodgate.SlidingWindow{Limit: 10, Window: ms},
	floodgate.SlidingLog{Limit: 10, Window: ms},
	floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: ms, Burst: 10},
		floodgate.FixedWindow{Limit: 20, Window: ms},
		floodgate.SlidingLog{Limit: 10, Window: ms},
	},
}

// TestRestoredKeysTouchedAgainAllocateNothing is the bar of the reclaimed
// keys: 2,000 keys called in turn, the clock 10 µs further at each call,
// so that every key is fully restored 2 ms after its call and called
// again 20 ms later, while the shard's insertions sweep. Every decision of
// the later rounds allocates nothing, for every kind, through Allow and
// Reserve. Before the sweep's
// grace (see the package doc, "# Memory"), insertions reclaimed the keys
// restored since the last sweep and the next round inserted them again:
// 2 allocations per call, a new entry and its key.
func TestRestoredKeysTouchedAgainAllocateNothing(t *testing.T) {
	const keys = 2_000
	for _, alg := range reclaimAlgorithms {
		name := "Limits"
		if _, ok := alg.(floodgate.Limits); !ok {
			name = algName(alg)
		}
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			// One shard, so that its sweeps see every key.
			s := newMemStore(t, &memstore.Options{Now: clock.Now, Shards: 1})
			lim, err := floodgate.New(s, alg, testOpts)
			require.NoError(t, err)
			ctx := context.Background()
			names := make([]string, keys)
			for i := range names {
				names[i] = "k" + strconv.Itoa(i)
			}
			denied := 0
			round := func() {
				for i, k := range names {
					clock.Advance(10 * time.Microsecond)
					// Allow takes the stores' Take path, Reserve their
					// Apply path.
					var d floodgate.Decision
					var err error
					if i%2 == 0 {
						d, err = lim.Allow(ctx, k)
					} else {
						d, err = lim.Reserve(ctx, k, 1, 0)
					}
					if err != nil {
						t.Fatal(err)
					}
					if !d.Allowed {
						denied++
					}
				}
			}
			round() // inserts every key
			allocs := testing.AllocsPerRun(1, func() {
				for range 3 {
					round()
				}
			})
			require.Zero(t, denied, "denied calls: every key must be restored between its calls")
			require.Zero(t, allocs, "allocations in 3 rounds of %d restored keys", keys)
			require.Equal(t, keys, s.Len())
		})
	}
}

// TestInsertionSweepsWaitReclaimGrace checks the bound the grace keeps:
// the sweeps of insertions reclaim the entries restored for longer than
// memstore.ReclaimGrace, and only those.
func TestInsertionSweepsWaitReclaimGrace(t *testing.T) {
	for _, alg := range reclaimAlgorithms {
		name := "Limits"
		if _, ok := alg.(floodgate.Limits); !ok {
			name = algName(alg)
		}
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			s := newMemStore(t, &memstore.Options{Now: clock.Now, Shards: 1})
			lim, err := floodgate.New(s, alg, testOpts)
			require.NoError(t, err)
			ctx := context.Background()
			call := func(prefix string, n int) {
				t.Helper()
				for i := range n {
					clock.Advance(time.Microsecond)
					_, err := lim.Allow(ctx, prefix+strconv.Itoa(i))
					require.NoError(t, err)
				}
			}
			// 300 keys, restored within 2 ms, then swept by insertions at
			// 64, 128 and 256 entries while within the grace: all stay.
			call("a", 100)
			clock.Advance(memstore.ReclaimGrace / 2)
			call("b", 200)
			require.Equal(t, 300, s.Len(), "restored keys within the grace were reclaimed")
			// Past the grace for a and b: the sweep at 512 entries reclaims
			// them, the one at 424 keeps the c keys, restored within it.
			clock.Advance(memstore.ReclaimGrace + 10*ms)
			call("c", 600)
			require.Equal(t, 600, s.Len(), "keys restored for longer than the grace were not reclaimed, or newer ones were")
		})
	}
}
