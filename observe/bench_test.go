package observe_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// BenchmarkWrapAllow compares Allow on memstore unobserved and wrapped,
// with an OnDecision that counts outcomes as a metrics adapter would, in
// one run: the difference is what observing a decision costs.
func BenchmarkWrapAllow(b *testing.B) {
	var counts [4]atomic.Int64
	count := func(_ context.Context, d observe.Decision) { counts[d.Outcome].Add(1) }
	for _, tc := range []struct {
		name string
		o    *observe.Observer
	}{
		{"plain", nil},
		{"observed", &observe.Observer{OnDecision: count}},
		{"observed/every", &observe.Observer{OnDecision: count, LatencyEvery: 1}},
		{"observed/untimed", &observe.Observer{OnDecision: count, LatencyEvery: 1 << 30}},
		{"observed/nop", &observe.Observer{OnDecision: func(context.Context, observe.Decision) {}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := newLimiter(b, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil)
			w, err := observe.Wrap(l, "bench", tc.o)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = w.Allow(ctx, "key")
			}
		})
	}
}
