package inflight_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/observe"
)

// BenchmarkLimiterAcquire measures an Acquire and its Release on a
// LocalStore: serially on one key, and in parallel on one key and on 1024;
// and observed, with OnAcquire and OnRelease counting as a metrics adapter
// would. Issue 15's bar: at most 100ns and 0 allocs per op serially;
// issue 16's: 0 allocs observed.
func BenchmarkLimiterAcquire(b *testing.B) {
	ctx := context.Background()
	var acquired [4]atomic.Int64
	var released atomic.Int64
	observer := &observe.Observer{
		OnAcquire: func(_ context.Context, e observe.Acquire) { acquired[e.Outcome].Add(1) },
		OnRelease: func(_ context.Context, e observe.Release) { released.Add(int64(e.Held)) },
	}
	newLim := func(b *testing.B, o *observe.Observer) *inflight.Limiter {
		l, err := inflight.New(inflight.NewLocalStore(), 1<<30, &inflight.Options{Observer: o})
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
	for _, o := range []struct {
		name string
		o    *observe.Observer
	}{{"", nil}, {"/observed", observer}} {
		b.Run("local/serial"+o.name, func(b *testing.B) {
			l := newLim(b, o.o)
			b.ReportAllocs()
			for b.Loop() {
				s, err := l.Acquire(ctx, keys[0])
				if err != nil || !s.Allowed {
					b.Fatal(s.Status, err)
				}
				_ = s.Release(ctx)
			}
		})
	}
	for _, n := range []int{1, len(keys)} {
		b.Run("local/parallel/keys="+strconv.Itoa(n), func(b *testing.B) {
			l := newLim(b, nil)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					s, err := l.Acquire(ctx, keys[i%n])
					if err != nil || !s.Allowed {
						b.Error(s.Status, err)
						return
					}
					_ = s.Release(ctx)
					i++
				}
			})
		})
	}
}
