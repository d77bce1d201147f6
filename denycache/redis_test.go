package denycache_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/denycache"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestRedisSparesCalls: 8 processes (each a default-options client, a
// redisstore and a deny cache) × 64 goroutines asking 200 times each for
// a key whose window is spent cost Redis no script call once each process
// has seen the denial: 102,400 decisions, 0 calls (INFO commandstats), on
// Redis and on the Cluster. It skips without REDIS_ADDR and
// REDIS_CLUSTER_ADDRS (miniredis has no commandstats).
func TestRedisSparesCalls(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) {
			var newClient func() redis.UniversalClient
			if cluster {
				addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
				if addrs == "" {
					t.Skip("set REDIS_CLUSTER_ADDRS to run on a Redis Cluster")
				}
				newClient = func() redis.UniversalClient {
					return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
				}
			} else {
				addr := os.Getenv("REDIS_ADDR")
				if addr == "" {
					t.Skip("set REDIS_ADDR to run on Redis (INFO commandstats counts the calls)")
				}
				newClient = func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: addr}) }
			}
			var b [6]byte
			_, _ = rand.Read(b[:])
			prefix := "fgtest:denycache:" + hex.EncodeToString(b[:]) + ":"
			admin := newClient()
			t.Cleanup(func() { _ = admin.Close() })
			ctx := context.Background()
			alg := floodgate.FixedWindow{Limit: 5, Window: 30 * 24 * time.Hour}
			const procs, goroutines, each = 8, 64, 200
			lims := make([]*floodgate.Limiter, procs)
			for i := range lims {
				c := newClient()
				t.Cleanup(func() { _ = c.Close() })
				rs, err := redisstore.New(c, &redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second})
				require.NoError(t, err)
				t.Cleanup(func() { _ = rs.Close() })
				s, err := denycache.New(rs, nil)
				require.NoError(t, err)
				lims[i], err = floodgate.New(s, alg, &floodgate.Options{Name: "abuse"})
				require.NoError(t, err)
			}
			// Each process asks until it is denied.
			var admitted int
			for _, lim := range lims {
				for {
					d, err := lim.Allow(ctx, "spent")
					require.NoError(t, err)
					if !d.Allowed {
						break
					}
					admitted++
				}
			}
			require.Equal(t, 5, admitted)
			before := evalCalls(t, admin)
			var wg sync.WaitGroup
			for _, lim := range lims {
				for range goroutines {
					wg.Go(func() {
						for range each {
							d, err := lim.Allow(ctx, "spent")
							if err != nil || d.Allowed {
								t.Errorf("Allow: %+v, %v", d, err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			require.Equal(t, int64(0), evalCalls(t, admin)-before, "script calls for %d denied decisions", procs*goroutines*each)
			// Clean up: the prefix's keys.
			del := func(ctx context.Context, n *redis.Client) error {
				it := n.Scan(ctx, 0, prefix+"*", 100).Iterator()
				for it.Next(ctx) {
					_ = n.Del(ctx, it.Val()).Err()
				}
				return it.Err()
			}
			if cc, ok := admin.(*redis.ClusterClient); ok {
				require.NoError(t, cc.ForEachMaster(ctx, del))
			} else {
				require.NoError(t, del(ctx, admin.(*redis.Client)))
			}
		})
	}
}

// evalCalls returns the EVALSHA and EVAL calls of every master, summed.
func evalCalls(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var total int64
	read := func(ctx context.Context, n *redis.Client) error {
		info, err := n.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
				_, rest, _ := strings.Cut(line, "calls=")
				v, _, _ := strings.Cut(rest, ",")
				var x int64
				for _, ch := range v {
					x = x*10 + int64(ch-'0')
				}
				mu.Lock()
				total += x
				mu.Unlock()
			}
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		require.NoError(t, cc.ForEachMaster(ctx, read))
	} else {
		require.NoError(t, read(ctx, c.(*redis.Client)))
	}
	return total
}
