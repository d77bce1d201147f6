package inflight_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/memstore"
)

// BenchmarkLimiterAcquire measures an Acquire and its Release on
// memstore: serially on one key, and in parallel on one key and on 1024.
// Issue 15's bar: at most 100ns and 0 allocs per op serially.
func BenchmarkLimiterAcquire(b *testing.B) {
	ctx := context.Background()
	newLim := func(b *testing.B) *inflight.Limiter {
		s, err := memstore.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		l, err := inflight.New(s, 1<<30, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	b.Run("memstore/serial", func(b *testing.B) {
		l := newLim(b)
		b.ReportAllocs()
		for b.Loop() {
			s, err := l.Acquire(ctx, keys[0])
			if err != nil || !s.Allowed {
				b.Fatal(s.Decision, err)
			}
			_ = s.Release(ctx)
		}
	})
	for _, n := range []int{1, len(keys)} {
		b.Run("memstore/parallel/keys="+strconv.Itoa(n), func(b *testing.B) {
			l := newLim(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					s, err := l.Acquire(ctx, keys[i%n])
					if err != nil || !s.Allowed {
						b.Error(s.Decision, err)
						return
					}
					_ = s.Release(ctx)
					i++
				}
			})
		})
	}
}
