package shard_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testkit"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/shard"
)

// BenchmarkShardAllow is what a shard Store adds to a decision: Allow on
// one key of a limit that admits every call, split over 16 shards of a
// memstore, against the memstore alone.
func BenchmarkShardAllow(b *testing.B) {
	alg := floodgate.TokenBucket{Rate: 1_000_000_000, Per: time.Hour, Burst: 1_000_000_000}
	for _, sharded := range []bool{false, true} {
		name := "memstore"
		if sharded {
			name = "shard16"
		}
		b.Run(name, func(b *testing.B) {
			var s floodgate.Store = newMem(b, nil)
			if sharded {
				s = newShard(b, s, shard.Options{Shards: 16})
			}
			lim, err := floodgate.New(s, alg, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := lim.Allow(ctx, "hot"); err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
				}
			})
		})
	}
}

// BenchmarkShardAllowRedisSerial is a serial caller's decision on a limit
// split over 16 shards of a redisstore on REDIS_ADDR: one round trip, from
// the batcher (a take asking UndoLate always goes through it).
//
//	REDIS_ADDR=127.0.0.1:6379 go test ./shard -run '^$' -bench ShardAllowRedisSerial -benchmem -benchtime 2000x -count 6
func BenchmarkShardAllowRedisSerial(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("set REDIS_ADDR to run on Redis")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = c.Close() })
	rs, err := redisstore.New(c, &redisstore.Options{Prefix: testkit.Prefix(b, c, "shardbench")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rs.Close() })
	lim, err := floodgate.New(newShard(b, rs, shard.Options{Shards: 16}), floodgate.TokenBucket{Rate: 1_000_000_000, Per: time.Hour, Burst: 1_000_000_000}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := lim.Allow(ctx, "hot"); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
