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

// BenchmarkWrapAllow compares Allow on memstore unobserved and observed,
// in one run: the difference is what observing a decision costs. tally
// counts into a Tally and gives the timed decisions (one in 64) to an
// OnTimed that counts them, as the metrics adapters do; event gives every
// decision to an OnDecision that counts outcomes; nop to one that does
// nothing. new is observe.New, wrap observe.Wrap of floodgate.New's
// Limiter. parallel decides on one key per goroutine.
func BenchmarkWrapAllow(b *testing.B) {
	var counts [4]atomic.Int64
	count := func(_ context.Context, d observe.Decision) { counts[d.Outcome].Add(1) }
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}
	for _, tc := range []struct {
		name string
		wrap bool
		o    func() *observe.Observer
	}{
		{"plain", false, func() *observe.Observer { return nil }},
		{"new/tally", false, func() *observe.Observer { return &observe.Observer{Tally: new(observe.Tally), OnTimed: count} }},
		{"new/tally/untimed", false, func() *observe.Observer { return &observe.Observer{Tally: new(observe.Tally)} }},
		{"new/event", false, func() *observe.Observer { return &observe.Observer{OnDecision: count} }},
		{"new/event/nop", false, func() *observe.Observer {
			return &observe.Observer{OnDecision: func(context.Context, observe.Decision) {}}
		}},
		{"new/event/every", false, func() *observe.Observer { return &observe.Observer{OnDecision: count, LatencyEvery: 1} }},
		{"wrap/tally", true, func() *observe.Observer { return &observe.Observer{Tally: new(observe.Tally), OnTimed: count} }},
		{"wrap/event", true, func() *observe.Observer { return &observe.Observer{OnDecision: count} }},
	} {
		newLim := func(b *testing.B) floodgate.Limiter {
			s, err := memstore.New(nil)
			if err != nil {
				b.Fatal(err)
			}
			var l floodgate.Limiter
			if tc.wrap {
				if l, err = floodgate.New(s, alg); err == nil {
					l, err = observe.Wrap(l, "bench", tc.o())
				}
			} else {
				l, err = observe.New(s, alg, "bench", tc.o())
			}
			if err != nil {
				b.Fatal(err)
			}
			return l
		}
		b.Run(tc.name+"/serial", func(b *testing.B) {
			l := newLim(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Allow(ctx, "key")
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
