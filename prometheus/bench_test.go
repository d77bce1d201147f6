package fgprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// BenchmarkObserverDecision measures a decision's event: alone (the
// adapter's cost: a lookup of its children and two atomic additions),
// and on memstore, unobserved and observed through this adapter, in one
// run, so that the difference is what the metrics cost a decision.
func BenchmarkObserverDecision(b *testing.B) {
	b.Run("event", func(b *testing.B) {
		o := newMetrics(b, nil).Observer()
		ctx := context.Background()
		d := observe.Decision{Name: "api", Key: "user-1", Op: floodgate.OpTake, N: 1, Outcome: observe.Allowed,
			Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}}
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o.OnDecision(ctx, d)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o.OnDecision(ctx, d)
				}
			})
		})
	})
	for _, tc := range []struct {
		name     string
		observed bool
	}{
		{"memstore/plain", false},
		{"memstore/observed", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := newLimiter(b, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil)
			if tc.observed {
				w, err := observe.Wrap(l, "api", newMetrics(b, nil).Observer())
				if err != nil {
					b.Fatal(err)
				}
				l = w
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Allow(ctx, "key")
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
// been seen, and that an observed memstore decision allocates nothing.
func TestAllocations(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	o.LatencyEvery = 1
	fireAll(o) // the first event of each label set resolves its children
	if n := testing.AllocsPerRun(100, func() { fireAll(o) }); n != 0 {
		t.Errorf("every event once: %v allocations, want 0", n)
	}
	l, err := observe.Wrap(newLimiter(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil), "api", o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Allow(ctx, "key"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = l.Allow(ctx, "key") }); n != 0 {
		t.Errorf("an observed memstore Allow: %v allocations, want 0", n)
	}
}
