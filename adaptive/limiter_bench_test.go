package adaptive

import (
	"context"
	"testing"
)

// BenchmarkLimiterAcquire measures one Acquire followed by Success, the cost
// a request pays, on the real clock. "serial" is one goroutine; "parallel"
// runs GOMAXPROCS goroutines against one Limiter (they share its mutex).
func BenchmarkLimiterAcquire(b *testing.B) {
	limits := []struct {
		name string
		new  func(b *testing.B) Limit
	}{
		{"vegas", func(b *testing.B) Limit {
			v, err := NewVegas(&VegasOptions{MaxConcurrency: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			return v
		}},
		{"windowed-gradient2", func(b *testing.B) Limit {
			g, err := NewGradient2(&Gradient2Options{MaxConcurrency: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			w, err := NewWindowed(g, nil)
			if err != nil {
				b.Fatal(err)
			}
			return w
		}},
		{"fixed", func(b *testing.B) Limit {
			f, err := NewFixed(1 << 20)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}},
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for _, lim := range limits {
			b.Run(lim.name, func(b *testing.B) {
				l, err := NewLimiter(lim.new(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					tok, err := l.Acquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					tok.Success()
				}
			})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		for _, lim := range limits {
			b.Run(lim.name, func(b *testing.B) {
				l, err := NewLimiter(lim.new(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						tok, err := l.Acquire(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						tok.Success()
					}
				})
			})
		}
	})
}

// BenchmarkLimiterAcquirePartition measures AcquirePartition followed by
// Success under PartitionBurst with two partitions (critical 0.7, sheddable
// 0.3) and a Fixed limit: "idle" below every reserve (the O(1) path),
// "saturated" with the limit full of sheddable requests, where each
// critical request walks the partitions for reserves, preemption and
// credit; "reference" is PartitionReference at the same saturation.
func BenchmarkLimiterAcquirePartition(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		rule PartitionRule
		held int
	}{
		{"idle", PartitionBurst, 0},
		{"saturated", PartitionBurst, 100},
		{"reference", PartitionReference, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f, err := NewFixed(100)
			if err != nil {
				b.Fatal(err)
			}
			l, err := NewLimiter(f, &LimiterOptions{PartitionRule: bc.rule, Partitions: []Partition{
				{Name: "critical", Share: 0.7}, {Name: "sheddable", Share: 0.3},
			}})
			if err != nil {
				b.Fatal(err)
			}
			for range bc.held {
				if _, err := l.AcquirePartition(ctx, "sheddable"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				tok, err := l.AcquirePartition(ctx, "critical")
				if err != nil {
					b.Fatal(err)
				}
				tok.Success()
			}
		})
	}
}
