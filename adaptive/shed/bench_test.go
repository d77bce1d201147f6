package shed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate/adaptive"
)

// BenchmarkShedderAllow measures one decision: on a gauge that returns a
// constant (the Shedder's own cost), on an adaptive.Limiter (one mutex
// acquisition more), and on a Fleet over LimiterLoad (the fleet's
// per-request cost: two of them and an atomic load); "serial" is one
// goroutine, "parallel" GOMAXPROCS goroutines sharing the Shedder.
func BenchmarkShedderAllow(b *testing.B) {
	gauges := []struct {
		name string
		new  func(b *testing.B) Gauge
	}{
		{"constant", func(*testing.B) Gauge { return GaugeFunc(func() float64 { return 0.85 }) }},
		{"limiter", func(b *testing.B) Gauge { return limiter(b) }},
		{"fleet", func(b *testing.B) Gauge {
			l := limiter(b)
			f, err := NewFleet(FleetSourceFunc(func(_ context.Context, local Load) (Load, error) {
				return Load{InFlight: local.InFlight + 500, Capacity: local.Capacity + 1000}, nil
			}), LimiterLoad(l), &FleetOptions{Manual: true})
			if err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			return f
		}},
	}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for _, g := range gauges {
				b.Run(g.name, func(b *testing.B) {
					s, err := New(g.new(b), nil)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					if mode == "serial" {
						for b.Loop() {
							s.Allow(adaptive.ClassSheddable)
						}
						return
					}
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							s.Allow(adaptive.ClassSheddable)
						}
					})
				})
			}
		})
	}
}

// limiter returns an adaptive.Limiter with a Fixed limit of 1000 and 800
// requests in flight.
func limiter(b *testing.B) *adaptive.Limiter {
	f, err := adaptive.NewFixed(1000)
	if err != nil {
		b.Fatal(err)
	}
	l, err := adaptive.NewLimiter(f, nil)
	if err != nil {
		b.Fatal(err)
	}
	for range 800 {
		if _, err := l.Acquire(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return l
}

// BenchmarkMiddlewareServeHTTP measures the middleware's own cost on the
// allowed path, around a handler that only writes a status.
func BenchmarkMiddlewareServeHTTP(b *testing.B) {
	s, err := New(GaugeFunc(func() float64 { return 0.5 }), nil)
	if err != nil {
		b.Fatal(err)
	}
	mw, err := Middleware(s, &MiddlewareOptions{Class: classHeader})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	w := &discardWriter{h: http.Header{}}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Class", adaptive.ClassSheddable)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}
