package shard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testkit"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/shard"
)

// TestShardedLease150Pods simulates 150 pods on a virtual clock
// (testing/synctest), each a lease Store with default options over its
// own shard Store (16 shards) over one shared memstore standing for
// Redis, deciding one global token bucket of 30,000 per second. Under a
// steady demand of 27,000 per second (180 per pod, every 10 ms) every
// decision is admitted and each pod calls the store at most 12 times per
// second (10.0 in this simulation: a refill a TargetInterval; 16.7 when a
// refill only topped the pool up from its low-water mark); at 1.5× the limit
// (270 per pod), the pods never admit more than Burst + Rate·T over the
// run, and admit at least Rate·T less the units the pools may hold.
func TestShardedLease150Pods(t *testing.T) {
	const (
		pods  = 150
		rate  = 30_000
		k     = 16
		every = 10 * time.Millisecond
	)
	alg := floodgate.TokenBucket{Rate: rate, Per: time.Second, Burst: rate}
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := newMem(t, nil)
		calls := make([]*testkit.Counting, pods)
		lims := make([]*floodgate.Limiter, pods)
		leases := make([]*lease.Store, pods)
		for i := range pods {
			calls[i] = &testkit.Counting{Store: mem}
			sh := newShard(t, calls[i], shard.Options{Shards: k})
			ls, err := lease.New(sh, nil)
			require.NoError(t, err)
			leases[i] = ls
			defer ls.Close()
			lims[i], err = floodgate.New(ls, alg, &floodgate.Options{Name: "global"})
			require.NoError(t, err)
		}
		// run has every pod make perPod decisions per second, in bursts
		// every 100 ms, for d; it returns the admissions and each pod's
		// store calls.
		run := func(perPod int, d time.Duration) (admitted, denied int64, perPodCalls []int64) {
			before := make([]int64, pods)
			for i := range pods {
				before[i] = calls[i].Calls.Load()
			}
			var adm, den atomic.Int64
			var wg sync.WaitGroup
			for i := range pods {
				wg.Go(func() {
					// perPod per second in steps of every: tick j makes
					// the decisions due by its end.
					ticks := int(d / every)
					made := 0
					for j := 1; j <= ticks; j++ {
						due := perPod * j * int(every) / int(time.Second)
						for ; made < due; made++ {
							dec, err := lims[i].Allow(ctx, "quota")
							if err != nil {
								t.Error(err)
								return
							}
							if dec.Allowed {
								adm.Add(1)
							} else {
								den.Add(1)
							}
						}
						time.Sleep(every)
					}
				})
			}
			wg.Wait()
			perPodCalls = make([]int64, pods)
			for i := range pods {
				perPodCalls[i] = calls[i].Calls.Load() - before[i]
			}
			return adm.Load(), den.Load(), perPodCalls
		}

		run(180, 2*time.Second) // settle
		const steady = 3 * time.Second
		admitted, denied, perPod := run(180, steady)
		most := int64(0)
		var total int64
		for _, c := range perPod {
			most = max(most, c)
			total += c
		}
		t.Logf("steady 27,000/s: admitted %d, denied %d; store calls per pod per second: most %.1f, mean %.1f",
			admitted, denied, float64(most)/steady.Seconds(), float64(total)/pods/steady.Seconds())
		require.Zero(t, denied)
		require.LessOrEqual(t, float64(most)/steady.Seconds(), 12.0)

		// Over the limit: the run starts with the bucket's burst full
		// enough for the pools; what was admitted in [start, end] is at
		// most Burst + Rate·T, and at least Rate·T less what 150 pools
		// of MaxBatch (the quota/16) may hold.
		time.Sleep(2 * time.Second) // the bucket refills
		const over = 4 * time.Second
		start := time.Now()
		admitted, denied, _ = run(270, over)
		elapsed := time.Since(start)
		bound := alg.Burst + int64(elapsed.Seconds()*rate)
		t.Logf("1.5× the limit for %v: admitted %d (bound %d), denied %d", elapsed, admitted, bound, denied)
		require.LessOrEqual(t, admitted, bound)
		require.GreaterOrEqual(t, admitted, int64(over.Seconds()*rate)-pods*(rate/16))
		for _, ls := range leases {
			require.NoError(t, ls.Close())
		}
	})
}
