package fgotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fgotel"
)

// benchAlg admits every decision of the benchmarks: a token bucket that
// refills a unit per nanosecond.
var benchAlg = floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}

// BenchmarkObserverAllow compares Allow on memstore unobserved (plain)
// and on the memstore wrapped by observe.Store with this package's
// Observer on the SDK (ManualReader), in one run: the difference is what
// the OpenTelemetry metrics of a decision cost end to end. observed has NoSpanEvents;
// spanevents has the default span events, with no span in the context,
// a span sampled out, or a recording span; every times every decision
// (LatencyEvery 1).
func BenchmarkObserverAllow(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	unsampledTP := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	b.Cleanup(func() { _ = unsampledTP.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name       string
		observe    bool
		spanEvents bool
		span       *sdktrace.TracerProvider // nil: no span in the context
		every      int
		parallel   bool
	}{
		{name: "memstore/plain"},
		{name: "memstore/observed", observe: true},
		{name: "memstore/observed-every", observe: true, every: 1},
		{name: "memstore/observed-spanevents", observe: true, spanEvents: true},
		{name: "memstore/observed-spanevents-unsampled", observe: true, spanEvents: true, span: unsampledTP},
		{name: "memstore/observed-spanevents-recording", observe: true, spanEvents: true, span: tp},
		{name: "memstore/plain-parallel", parallel: true},
		{name: "memstore/observed-parallel", observe: true, parallel: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var l *floodgate.Limiter
			if tc.observe {
				m, _ := newMetrics(b, &fgotel.Options{NoSpanEvents: !tc.spanEvents})
				o := m.Observer()
				o.LatencyEvery = tc.every
				l = observed(b, "bench", benchAlg, nil, o)
			} else {
				l = newLimiter(b, benchAlg, nil)
			}
			ctx := context.Background()
			if tc.span != nil {
				c, s := tc.span.Tracer("bench").Start(ctx, "request")
				defer s.End()
				ctx = c
			}
			b.ReportAllocs()
			if tc.parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _ = l.Allow(ctx, "key")
					}
				})
				return
			}
			for b.Loop() {
				_, _ = l.Allow(ctx, "key")
			}
		})
	}
}

// BenchmarkMetricsCollect measures a collection of the SDK's
// ManualReader over the decision counts of 1 and 20 limiter names, each
// with admissions and denials, one of them a composite: the work that
// counting in the Tally moved from the decisions to the collections.
func BenchmarkMetricsCollect(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	for _, names := range []int{1, 20} {
		b.Run(fmt.Sprintf("names=%d", names), func(b *testing.B) {
			m, r := newMetrics(b, nil)
			o := m.Observer()
			ctx := context.Background()
			for i := range names {
				var alg floodgate.Algorithm = floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 10}
				if i == 0 {
					alg = floodgate.Limits{alg, floodgate.FixedWindow{Limit: 5, Window: time.Minute}}
				}
				l := observed(b, fmt.Sprintf("l%d", i), alg, clock, o)
				for range 20 {
					_, _ = l.Allow(ctx, "k")
				}
			}
			var rm metricdata.ResourceMetrics
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Collect(ctx, &rm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
