package observe_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// BenchmarkStoreAllow compares Allow on memstore unobserved and observed
// (a limiter on observe.Store of the memstore), in one run: the
// difference is what observing a decision costs. tally counts into a
// Tally and gives the timed decisions (one in 64) to an OnTimed that
// counts them, as the metrics adapters do; event gives every decision to
// an OnDecision that counts outcomes; nop to one that does nothing.
// parallel decides on one key per goroutine. serial also reports
// cpu-ns/op, the process' CPU time per decision, which time spent
// descheduled on a shared machine does not inflate (the benchmark
// allocates nothing, so no other goroutine runs).
func BenchmarkStoreAllow(b *testing.B) {
	var counts [4]atomic.Int64
	count := func(_ context.Context, d observe.DecisionEvent) { counts[d.Outcome].Add(1) }
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}
	for _, tc := range []struct {
		name string
		o    func() *observe.Observer
	}{
		{"plain", func() *observe.Observer { return nil }},
		{"tally", func() *observe.Observer { return &observe.Observer{Tally: new(observe.Tally), OnTimed: count} }},
		{"tally/untimed", func() *observe.Observer { return &observe.Observer{Tally: new(observe.Tally)} }},
		{"event", func() *observe.Observer { return &observe.Observer{OnDecision: count} }},
		{"event/nop", func() *observe.Observer {
			return &observe.Observer{OnDecision: func(context.Context, observe.DecisionEvent) {}}
		}},
		{"event/every", func() *observe.Observer { return &observe.Observer{OnDecision: count, LatencyEvery: 1} }},
	} {
		newLim := func(b *testing.B) *floodgate.Limiter {
			mem, err := memstore.New(nil)
			if err != nil {
				b.Fatal(err)
			}
			s, err := observe.Store(mem, tc.o())
			if err != nil {
				b.Fatal(err)
			}
			l, err := floodgate.New(s, alg, &floodgate.Options{Name: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			return l
		}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			l := newLim(b)
			ctx := context.Background()
			b.ReportAllocs()
			c0, ok := cpuTime()
			for b.Loop() {
				_, _ = l.Allow(ctx, "key")
			}
			if c1, ok1 := cpuTime(); ok && ok1 {
				b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			l := newLim(b)
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := "key" + strconv.FormatInt(id.Add(1), 10)
				ctx := context.Background()
				for pb.Next() {
					_, _ = l.Allow(ctx, key)
				}
			})
		})
	}
}
