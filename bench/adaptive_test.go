package bench

import (
	"context"
	"errors"
	"testing"
)

// concLib is a concurrency limiter: run admits one request and ends it
// successfully at once (Acquire then Success), or returns the rejection.
type concLib struct {
	name string
	skip string
	open func() (run func(context.Context) error, err error)
}

// errFull is the rejection of the semaphore baseline.
var errFull = errors.New("semaphore full")

// semaphoreBaseline is a static concurrency limit on a buffered channel:
// the least an in-flight limit can cost, with no latency measurement and no
// adaptation. It is a floor to read the adaptive numbers against, not a
// peer: no adaptive concurrency limiter is available from the module proxy
// here (github.com/platinummonkey/go-concurrency-limits is not served).
func semaphoreBaseline() concLib {
	return concLib{name: "baseline-chan-semaphore", open: func() (func(context.Context) error, error) {
		sem := make(chan struct{}, 20)
		return func(context.Context) error {
			select {
			case sem <- struct{}{}:
				<-sem
				return nil
			default:
				return errFull
			}
		}, nil
	}}
}

func concLibs() []concLib {
	return append(floodgateAdaptive(), semaphoreBaseline())
}

func openConc(b *testing.B, l concLib) func(context.Context) error {
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
			b.ReportAllocs()
			for b.Loop() {
				if err := run(ctx); err != nil {
					b.Fatal(err)
				}
			}
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
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := run(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
