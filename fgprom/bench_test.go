package fgprom_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkObserverDecision measures what the adapter costs a decision:
// the OnTimed event alone (a lookup of the limiter's histogram and an
// observation; one decision in LatencyEvery pays it), and a memstore
// decision, unobserved and on a store wrapped by observe.Store with the
// adapter's Observer, in one run, so that the difference is what the metrics cost
// a decision: the Tally's count, and the timing of one in LatencyEvery.
func BenchmarkObserverDecision(b *testing.B) {
	b.Run("timed", func(b *testing.B) {
		o := newMetrics(b, nil).Observer()
		ctx := context.Background()
		d := observe.DecisionEvent{Name: "api", Key: "user-1", Op: floodgate.OpTake, N: 1, Outcome: observe.Allowed,
			Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}, Latency: 80 * time.Nanosecond}
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o.OnTimed(ctx, d)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o.OnTimed(ctx, d)
				}
			})
		})
	})
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}
	for _, tc := range []struct {
		name     string
		observed bool
	}{
		{"memstore/plain", false},
		{"memstore/observed", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var l *floodgate.Limiter
			if tc.observed {
				l = newObserved(b, alg, nil, "api", newMetrics(b, nil).Observer())
			} else {
				l = newLimiter(b, alg, nil)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Allow(ctx, "key")
			}
		})
	}
}

// BenchmarkMetricsCollect measures a scrape of the decision metrics of
// observed limiters that have all decided: Collect alone (the Tally's
// read of every stripe of every limiter, and the constant metrics), and
// a registry's Gather of them (what a scrape costs before encoding).
func BenchmarkMetricsCollect(b *testing.B) {
	for _, n := range []int{1, 100} {
		m := newMetrics(b, nil)
		o := m.Observer()
		ctx := context.Background()
		for i := range n {
			l := newObserved(b, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil, fmt.Sprint("limiter-", i), o)
			_, _ = l.Allow(ctx, "key")
		}
		b.Run(fmt.Sprintf("limiters=%d/collect", n), func(b *testing.B) {
			ch := make(chan prometheus.Metric, 1024*n)
			b.ReportAllocs()
			for b.Loop() {
				m.Collect(ch)
				for len(ch) > 0 {
					<-ch
				}
			}
		})
		b.Run(fmt.Sprintf("limiters=%d/gather", n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(m)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkObserverStoreCall measures a store's round-trip event: a
// lookup, a counter and two histograms.
func BenchmarkObserverStoreCall(b *testing.B) {
	o := newMetrics(b, nil).Observer()
	ctx := context.Background()
	e := observe.StoreCall{Name: "redis", Node: "127.0.0.1:6379", Decisions: 1, Outcome: observe.CallOK, Latency: 300 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		o.OnStoreCall(ctx, e)
	}
}

// TestAllocations checks that no event allocates once its label set has
// been seen, and that a decision of a limiter on a memstore wrapped by
// observe.Store with the adapter's Observer allocates nothing, whether it
// is timed (LatencyEvery 1: every decision reaches OnTimed) or counted
// only (the default: one in 64 is timed).
func TestAllocations(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	o.LatencyEvery = 1
	fire := fireAll(t, o)
	fire() // the first event of each label set resolves its children
	if n := testing.AllocsPerRun(100, fire); n != 0 {
		t.Errorf("every event once: %v allocations, want 0", n)
	}
	for _, every := range []int{1, 0} {
		o := m.Observer()
		o.LatencyEvery = every
		l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil, fmt.Sprint("every-", every), o)
		ctx := context.Background()
		for name, decide := range map[string]func(){
			"Allow":  func() { _, _ = l.Allow(ctx, "key") },
			"AllowN": func() { _, _ = l.AllowN(ctx, "key", 3) },
			"Apply":  func() { _, _ = l.Apply(ctx, "key", floodgate.Request{Op: floodgate.OpTake, N: 2}, nil) },
			"Wait":   func() { _ = l.Wait(ctx, "key", 1) },
		} {
			decide() // the first decision of a key stores it
			if n := testing.AllocsPerRun(1000, decide); n != 0 {
				t.Errorf("an observed memstore %s (LatencyEvery %d): %v allocations, want 0", name, every, n)
			}
		}
	}
}
