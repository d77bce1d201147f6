//go:build linux

package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/shard"
)

// TestFaultShardBlastRadius kills one of 3 masters (no replicas, a Cluster
// that serves the slots it still covers) while 8 processes × 8
// goroutines spend a global limit of 3,200 split over 16 shards
// (FailClosed, every shard probed). The shards on the other two masters
// keep admitting exactly: once the run ends, every one of their units has
// been admitted, and no decision on them failed; the dead master's shards
// (5 or 6 of 16: at most ⌈16/3⌉/16 of the quota) are the only ones
// whose decisions the failure policy made; and the whole never exceeds
// the quota.
func TestFaultShardBlastRadius(t *testing.T) {
	skipUnderRace(t) // no failed call on the masters still up: a latency bar
	cl := startCluster(t, 3, 0, "--cluster-require-full-coverage", "no")
	const procs, goroutines, k, quota = 8, 8, 16, 3200
	var mu sync.Mutex
	failedOn := map[string]int{}
	var errs []string
	var lost atomic.Int64
	var killed atomic.Bool
	// Failed calls after the kill, but for NOSCRIPT: a node's first call
	// of a script, which the store follows with EVAL.
	obs := &observe.Observer{OnStoreCall: func(_ context.Context, e observe.StoreCall) {
		if e.Err != nil && killed.Load() && !strings.Contains(e.Err.Error(), "NOSCRIPT") {
			lost.Add(int64(e.Decisions))
			mu.Lock()
			failedOn[e.Node]++
			if len(errs) < 20 {
				errs = append(errs, e.Node+": "+e.Err.Error())
			}
			mu.Unlock()
		}
	}}
	alg := floodgate.FixedWindow{Limit: quota, Window: 30 * 24 * time.Hour}
	lims := make([]*floodgate.Limiter, procs)
	for i := range lims {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs()})
		t.Cleanup(func() { _ = c.Close() })
		s, err := New(c, &Options{OnFailure: FailClosed, Observer: obs, Prefix: "fgblast:"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		sh, err := shard.New(s, &shard.Options{Shards: k, Probes: k - 1})
		require.NoError(t, err)
		lims[i], err = floodgate.New(sh, alg, &floodgate.Options{Name: "blast"})
		require.NoError(t, err)
	}
	victim := cl.masters()[0]
	var admitted atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for _, lim := range lims {
		for range goroutines {
			wg.Go(func() {
				for denials := 0; denials < 5; {
					d, err := lim.Allow(ctx, "global")
					switch {
					case err != nil:
						t.Errorf("Allow: %v", err)
						return
					case d.Allowed:
						admitted.Add(1)
						denials = 0
					case killed.Load():
						denials++
					}
				}
			})
		}
	}
	for admitted.Load() < quota/4 {
		time.Sleep(time.Millisecond)
	}
	before := admitted.Load()
	cl.proc(victim).kill()
	killed.Store(true)
	wg.Wait()

	// The shards left: the limiter's keys on the masters still up.
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs()})
	t.Cleanup(func() { _ = admin.Close() })
	var live []string
	for _, m := range cl.masters() {
		if m == victim {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: m})
		keys, err := n.Keys(ctx, "fgblast:*").Result()
		_ = n.Close()
		require.NoError(t, err)
		live = append(live, keys...)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("admitted %d before the kill of %s, %d in all; %d shards on the masters left; failed calls by node %v (%d decisions)",
		before, victim, admitted.Load(), len(live), failedOn, lost.Load())
	require.GreaterOrEqual(t, len(live), k-(k+2)/3, "at most ⌈K/3⌉ shards on the dead master: %v", live)
	require.LessOrEqual(t, admitted.Load(), int64(quota))
	// Every unit of the live shards admitted: their parts of the quota.
	require.GreaterOrEqual(t, admitted.Load(), int64(len(live))*quota/k)
	for node := range failedOn {
		require.Equal(t, victim, node, "a call to a master still up failed: %s", strings.Join(errs, "\n"))
	}
	for _, key := range live {
		require.True(t, strings.Contains(key, ":blast:shard16:"), key)
	}
}
