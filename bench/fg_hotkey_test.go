//go:build !nofg_redisstore

package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testkit"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/shard"
)

// hotKeyDecisions is the number of decisions of one round of
// BenchmarkClusterHotKey, per b.N.
const hotKeyDecisions = 30_000

// BenchmarkClusterHotKey is one hot key on the Redis Cluster at
// REDIS_CLUSTER_ADDRS: 64 goroutines make 30,000 decisions of a token
// bucket that admits them all, through one default-options client and
// the store's defaults, unsharded, split by package shard over 4 and 16
// shards, and over 16 shards behind package lease's pools (defaults). From INFO commandstats (EVALSHA and EVAL) it reports the
// busiest master's share of the script time (busiest-%), the script time
// per decision summed over the masters (script-µs/op) and the decisions
// per second. Unsharded, the key's state is on one master; sharded, it
// spreads over the masters.
func BenchmarkClusterHotKey(b *testing.B) {
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		b.Skip("set REDIS_CLUSTER_ADDRS (comma-separated seed nodes of a Redis Cluster) to run the hot key on a Cluster")
	}
	for _, v := range []struct {
		name   string
		k      int
		leased bool
	}{{"floodgate", 0, false}, {"floodgate-shard4", 4, false}, {"floodgate-shard16", 16, false}, {"floodgate-shard16-leased", 16, true}} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
			b.Cleanup(func() { _ = c.Close() })
			prefix := "fgbench:" + runID() + ":hotkey:" + v.name + ":"
			b.Cleanup(func() { deleteClusterKeys(c, prefix) })
			rs, err := redisstore.New(c, &redisstore.Options{Prefix: prefix})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { rs.Close() })
			var store floodgate.Store = rs
			if v.k > 0 {
				if store, err = shard.New(rs, &shard.Options{Shards: v.k}); err != nil {
					b.Fatal(err)
				}
			}
			if v.leased {
				ls, err := lease.New(store, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = ls.Close() })
				store = ls
			}
			lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1_000_000_000, Per: time.Hour, Burst: 1_000_000_000}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
				b.Fatal(err)
			}
			for range 200 {
				if _, err := lim.Allow(ctx, "hot"); err != nil {
					b.Fatal(err)
				}
			}
			before, err := scriptUsec(c)
			if err != nil {
				b.Fatal(err)
			}
			total := hotKeyDecisions * b.N
			var next, failed atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range goroutines64 {
				wg.Go(func() {
					for next.Add(1) <= int64(total) {
						if d, err := lim.Allow(ctx, "hot"); err != nil || !d.Allowed {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			after, err := scriptUsec(c)
			if err != nil {
				b.Fatal(err)
			}
			var sum, busiest float64
			for addr, u := range after {
				d := u - before[addr]
				sum += d
				busiest = max(busiest, d)
			}
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d of %d decisions failed or were denied", f, total)
			}
			if sum > 0 {
				b.ReportMetric(100*busiest/sum, "busiest-%")
			}
			b.ReportMetric(sum/float64(total), "script-µs/op")
			b.ReportMetric(float64(total)/elapsed.Seconds(), "decisions/s")
		})
	}
}

// scriptUsec returns each master's script time so far, in µs: the usec of
// EVALSHA and EVAL in INFO commandstats.
func scriptUsec(c *redis.ClusterClient) (map[string]float64, error) {
	st, err := testkit.ScriptStats(context.Background(), c)
	out := map[string]float64{}
	for addr, s := range st {
		out[addr] = s.Usec
	}
	return out, err
}

// deleteClusterKeys deletes the keys under prefix on every master.
func deleteClusterKeys(c *redis.ClusterClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		it := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			_ = n.Del(ctx, it.Val()).Err()
		}
		return it.Err()
	})
}

// BenchmarkRedisScriptTime is the script time Redis spends per decision,
// by algorithm, on the standalone server at REDIS_ADDR: 20,000 decisions
// on 1,000 keys, all admitted (the quota of the throughput scenario),
// one at a time (serial: one script call per decision, batching or not)
// and from 64 goroutines (batched: the store's default pipelines share
// script calls). It reports the EVALSHA and EVAL usec of INFO
// commandstats per decision (script-µs/op) and the decisions per script
// call (per-call). docs/redis.md sizes a Cluster from these figures.
func BenchmarkRedisScriptTime(b *testing.B) {
	addr := redisAddr(b)
	algs := []struct {
		name string
		alg  floodgate.Algorithm
	}{
		{"tokenbucket", tokenBucket(admitAll)},
		{"leakybucket", floodgate.LeakyBucket{Rate: admitAll.Limit, Per: admitAll.Period, Capacity: admitAll.Limit}},
		{"fixedwindow", fixedWindow(admitAll)},
		{"slidingwindow", slidingWindow(admitAll)},
		{"slidinglog", floodgate.SlidingLog{Limit: admitAll.Limit, Window: time.Minute}},
		{"limits2", floodgate.Limits{tokenBucket(admitAll), fixedWindow(admitAll)}},
	}
	for _, a := range algs {
		for _, g := range []int{1, goroutines64} {
			mode := "serial"
			if g > 1 {
				mode = "64goroutines"
			}
			b.Run(a.name+"/"+mode, func(b *testing.B) {
				ctx := context.Background()
				c := redis.NewClient(&redis.Options{Addr: addr})
				b.Cleanup(func() { _ = c.Close() })
				prefix := "fgbench:" + runID() + ":scripttime:" + a.name + ":" + mode + ":"
				b.Cleanup(func() {
					it := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
					for it.Next(context.Background()) {
						_ = c.Del(context.Background(), it.Val()).Err()
					}
				})
				rs, err := redisstore.New(c, &redisstore.Options{Prefix: prefix})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { rs.Close() })
				lim, err := floodgate.New(rs, a.alg, nil)
				if err != nil {
					b.Fatal(err)
				}
				keys := makeKeys("k", 1000)
				for _, k := range keys {
					if _, err := lim.Allow(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				before, calls0, err := standaloneScript(c)
				if err != nil {
					b.Fatal(err)
				}
				total := 20_000 * b.N
				var next, failed atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range g {
					wg.Go(func() {
						for i := next.Add(1); i <= int64(total); i = next.Add(1) {
							if d, err := lim.Allow(ctx, keys[i%int64(len(keys))]); err != nil || !d.Allowed {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				after, calls1, err := standaloneScript(c)
				if err != nil {
					b.Fatal(err)
				}
				if f := failed.Load(); f > 0 {
					b.Fatalf("%d of %d decisions failed or were denied", f, total)
				}
				b.ReportMetric((after-before)/float64(total), "script-µs/op")
				b.ReportMetric(float64(total)/float64(calls1-calls0), "per-call")
			})
		}
	}
}

// BenchmarkRedisScriptFloor is what Redis spends per decision on the reads
// and writes alone, in a script of batch.lua's shape (one TIME, then for
// each decision its keys read with GET and written with SET PX and a reply
// string), 12 decisions a call as the store's batches carry at 64
// goroutines: for one key a decision (one limit) and for two (a Limits of
// two, one key per limit). Set beside BenchmarkRedisScriptTime, it shows
// how much of a decision's script time is the state's reads and writes.
func BenchmarkRedisScriptFloor(b *testing.B) {
	addr := redisAddr(b)
	for _, keysPer := range []int{1, 2} {
		b.Run(fmt.Sprintf("%dkeys", keysPer), func(b *testing.B) {
			ctx := context.Background()
			c := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { _ = c.Close() })
			prefix := "fgbench:" + runID() + ":floor:"
			b.Cleanup(func() {
				it := c.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
				for it.Next(context.Background()) {
					_ = c.Del(context.Background(), it.Val()).Err()
				}
			})
			sha, err := c.ScriptLoad(ctx, floorScript).Result()
			if err != nil {
				b.Fatal(err)
			}
			const perCall, calls = 12, 2000
			keys := make([]string, perCall*keysPer)
			before, calls0, err := standaloneScript(c)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range calls * b.N {
				for d := range perCall {
					for j := range keysPer {
						keys[d*keysPer+j] = fmt.Sprintf("%sk%d:%d", prefix, (i*perCall+d)%1000, j)
					}
				}
				if err := c.EvalSha(ctx, sha, keys, keysPer).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after, calls1, err := standaloneScript(c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((after-before)/float64((calls1-calls0)*perCall), "script-µs/op")
		})
	}
}

// floorScript reads and writes ARGV[1] keys a decision, for #KEYS/ARGV[1]
// decisions, and replies a string a decision, as the batch scripts do.
const floorScript = `
local t = redis.call('TIME')
local per, out = ARGV[1] + 0, {}
for d = 1, #KEYS, per do
  local parts = {t[1] .. ' ' .. t[2] .. '000'}
  for j = d, d + per - 1 do
    local old = redis.call('GET', KEYS[j])
    local new = string.format('%d%09d', t[1] + 1, t[2] * 1000)
    redis.call('SET', KEYS[j], new, 'PX', '60000')
    parts[#parts + 1] = (old or '0') .. ' ' .. new .. ' 1 1'
  end
  out[#out + 1] = table.concat(parts, ' ')
end
return out
`

// standaloneScript returns the server's EVALSHA and EVAL usec and calls so
// far, from INFO commandstats.
func standaloneScript(c *redis.Client) (usec float64, calls int64, err error) {
	st, err := testkit.ScriptStats(context.Background(), c)
	for _, s := range st {
		usec += s.Usec
		calls += s.Calls
	}
	return usec, calls, err
}
