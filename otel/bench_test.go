package fgotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	fgotel "github.com/floodgate-go/floodgate/otel"
)

// BenchmarkObserverOnDecision measures one OnDecision: on a no-op
// MeterProvider (this package's share alone: the attribute-set lookup and
// the calls), on the SDK with a ManualReader (what a program pays), with
// a timed decision (one more histogram record), and with a recording
// span (the span event).
func BenchmarkObserverOnDecision(b *testing.B) {
	allowed := observe.Decision{Name: "api", Key: "k", N: 1, Outcome: observe.Allowed,
		Decision: floodgate.Decision{Allowed: true, Limit: 100, Remaining: 99}}
	timed := allowed
	timed.Latency = 30 * time.Microsecond
	sdk := func(b *testing.B) *sdkmetric.MeterProvider {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		return mp
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name     string
		provider func(*testing.B) *sdkmetric.MeterProvider // nil: noop
		d        observe.Decision
		span     bool
		parallel bool
	}{
		{name: "noop", d: allowed},
		{name: "sdk", provider: sdk, d: allowed},
		{name: "sdk/timed", provider: sdk, d: timed},
		{name: "sdk/span", provider: sdk, d: allowed, span: true},
		{name: "sdk/parallel", provider: sdk, d: allowed, parallel: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			opts := &fgotel.Options{MeterProvider: noop.NewMeterProvider()}
			if tc.provider != nil {
				opts.MeterProvider = tc.provider(b)
			}
			m, err := fgotel.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			on := m.Observer().OnDecision
			ctx := context.Background()
			if tc.span {
				c, s := tp.Tracer("bench").Start(ctx, "request")
				defer s.End()
				ctx = c
			}
			d := tc.d
			b.ReportAllocs()
			if tc.parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						on(ctx, d)
					}
				})
				return
			}
			for b.Loop() {
				on(ctx, d)
			}
		})
	}
}

// BenchmarkWrapAllow compares Allow on memstore unobserved and wrapped
// with this package's Observer on the SDK, in one run: the difference is
// what the OpenTelemetry metrics of a decision cost end to end.
func BenchmarkWrapAllow(b *testing.B) {
	for _, tc := range []struct {
		name    string
		observe bool
		every   int
	}{
		{"plain", false, 0},
		{"otel", true, 0},
		{"otel/every", true, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := newLimiter(b, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil)
			if tc.observe {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
				m, err := fgotel.New(&fgotel.Options{MeterProvider: mp})
				if err != nil {
					b.Fatal(err)
				}
				o := m.Observer()
				o.LatencyEvery = tc.every
				if l, err = observe.Wrap(l, "bench", o); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Allow(ctx, "key")
			}
		})
	}
}
