package denycache_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/denycache"
	"github.com/floodgate-go/floodgate/internal/testkit"
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
			newClient, real := testkit.Clients(t, cluster)
			if !real {
				t.Skip("set REDIS_ADDR to run on Redis (INFO commandstats counts the calls; miniredis has none)")
			}
			admin := newClient()
			prefix := testkit.Prefix(t, admin, "denycache")
			ctx := context.Background()
			alg := floodgate.FixedWindow{Limit: 5, Window: 30 * 24 * time.Hour}
			const procs, goroutines, each = 8, 64, 200
			lims := make([]*floodgate.Limiter, procs)
			for i := range lims {
				c := newClient()
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
		})
	}
}

// evalCalls returns the EVALSHA and EVAL calls of every master, summed.
func evalCalls(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	st, err := testkit.ScriptStats(context.Background(), c)
	require.NoError(t, err)
	var n int64
	for _, s := range st {
		n += s.Calls
	}
	return n
}
