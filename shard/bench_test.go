package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
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
