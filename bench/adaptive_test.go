package bench

import (
	"context"
	"sync/atomic"
	"testing"
)

// concLib is a concurrency limiter: run admits one request and ends it
// successfully at once (Acquire then Success), or reports a rejection
// (false): an adaptive limit may shrink below the benchmark's goroutines
// when a busy machine stretches the measured latencies, and a rejection is
// then a result, not an error.
type concLib struct {
	name string
	skip string
	open func() (run func(context.Context) (bool, error), err error)
}

// semaphoreBaseline is a static concurrency limit on a buffered channel:
// the least an in-flight limit can cost, with no latency measurement and no
// adaptation. It is a floor to read the adaptive numbers against, not a
// peer: no adaptive concurrency limiter is available from the module proxy
// here (github.com/platinummonkey/go-concurrency-limits is not served).
func semaphoreBaseline() concLib {
	return concLib{name: "baseline-chan-semaphore", open: func() (func(context.Context) (bool, error), error) {
		sem := make(chan struct{}, 20)
		return func(context.Context) (bool, error) {
			select {
			case sem <- struct{}{}:
				<-sem
				return true, nil
			default:
				return false, nil
			}
		}, nil
	}}
}

func concLibs() []concLib {
	return append(floodgateAdaptive(), semaphoreBaseline())
}

func openConc(b *testing.B, l concLib) func(context.Context) (bool, error) {
	b.Helper()
	if l.skip != "" {
		b.Skip(l.skip)
	}
	run, err := l.open()
	if err != nil {
		b.Fatalf("%s: %v", l.name, err)
	}
	return run
}

// BenchmarkAdaptiveSerial is one Acquire followed by Success at a time.
func BenchmarkAdaptiveSerial(b *testing.B) {
	ctx := context.Background()
	for _, l := range concLibs() {
		b.Run(l.name, func(b *testing.B) {
			run := openConc(b, l)
			var calls, rejected int64
			b.ReportAllocs()
			for b.Loop() {
				ok, err := run(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					rejected++
				}
				calls++
			}
			reportRejected(b, calls, rejected)
		})
	}
}

// BenchmarkAdaptiveParallel is Acquire followed by Success from GOMAXPROCS
// goroutines sharing one limiter; they never reach its limit.
func BenchmarkAdaptiveParallel(b *testing.B) {
	ctx := context.Background()
	for _, l := range concLibs() {
		b.Run(l.name, func(b *testing.B) {
			run := openConc(b, l)
			var calls, rejected atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var c, r int64
				for pb.Next() {
					ok, err := run(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if !ok {
						r++
					}
					c++
				}
				calls.Add(c)
				rejected.Add(r)
			})
			b.StopTimer()
			reportRejected(b, calls.Load(), rejected.Load())
		})
	}
}

// reportRejected reports the share of rejected Acquires as the metric
// rejected/op when there were any.
func reportRejected(b *testing.B, calls, rejected int64) {
	b.Helper()
	if rejected > 0 && calls > 0 {
		b.ReportMetric(float64(rejected)/float64(calls), "rejected/op")
	}
}
