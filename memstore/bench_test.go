package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// benchAlgorithms are the five algorithms at a rate that keeps most
// decisions admitted in the serial benchmarks.
var benchAlgorithms = []floodgate.Algorithm{
	floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 1_000_000},
	floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 1_000_000},
	floodgate.FixedWindow{Limit: 1_000_000, Window: time.Hour},
	floodgate.SlidingWindow{Limit: 1_000_000, Window: time.Hour},
	floodgate.SlidingLog{Limit: 1_000, Window: time.Hour},
}

// algName names the kind of a in test names.
func algName(a floodgate.Algorithm) string { k, _ := step.KindOf(a); return k.String() }

// BenchmarkFloor measures time.Now plus one compare-and-swap: the least a
// decision on a shared word can cost on this machine.
func BenchmarkFloor(b *testing.B) {
	var w atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now().UnixNano()
		old := w.Load()
		w.CompareAndSwap(old, max(old, now)+1)
	}
}

func BenchmarkStoreApply(b *testing.B) {
	ctx := context.Background()
	req := floodgate.Request{N: 1}
	for _, alg := range benchAlgorithms {
		b.Run(algName(alg)+"/serial/1key", func(b *testing.B) {
			s, _ := memstore.New(nil)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := applyOnce(ctx, s, "key", alg, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(algName(alg)+"/parallel/100000keys", func(b *testing.B) {
			s, _ := memstore.New(nil)
			keys := makeKeys(100_000)
			for _, k := range keys {
				_, _ = applyOnce(ctx, s, k, alg, req)
			}
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(7919) * 7919
				for pb.Next() {
					i++
					if _, err := applyOnce(ctx, s, keys[i%uint64(len(keys))], alg, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkLimits compares a Limits of two limits with one of them alone,
// through a Limiter's Allow, one key and many: the composite decides
// under one lock where the token bucket alone is one compare-and-swap.
func BenchmarkLimits(b *testing.B) {
	ctx := context.Background()
	tb := floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 1_000_000}
	fw := floodgate.FixedWindow{Limit: 1_000_000, Window: time.Hour}
	for _, c := range []struct {
		name string
		alg  floodgate.Algorithm
	}{
		{"one/tb", tb},
		{"one/fw", fw},
		{"two/tb+fw", floodgate.Limits{tb, fw}},
		{"two/tb+tb", floodgate.Limits{tb, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 1_000_000}}},
	} {
		b.Run(c.name+"/serial/1key", func(b *testing.B) {
			s, _ := memstore.New(nil)
			lim, err := floodgate.New(s, c.alg, testOpts)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := lim.Allow(ctx, "key"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel/100000keys", func(b *testing.B) {
			s, _ := memstore.New(nil)
			lim, err := floodgate.New(s, c.alg, testOpts)
			if err != nil {
				b.Fatal(err)
			}
			keys := makeKeys(100_000)
			for _, k := range keys {
				_, _ = lim.Allow(ctx, k)
			}
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(7919) * 7919
				for pb.Next() {
					i++
					if _, err := lim.Allow(ctx, keys[i%uint64(len(keys))]); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkLimiterAllow is one key's Allow through a Limiter on a token
// bucket that admits every call, with the store's default clock and with
// the coarser clocks a user may inject through Options.Now: the clock's
// share of a decision is the difference.
//
//   - default: the wall clock at New plus the monotonic time since
//     (time.Since, one read of the monotonic clock).
//   - time.Now: Options.Now = time.Now, which reads the wall clock and the
//     monotonic clock.
//   - cached: cachedClock, a time read by a goroutine every millisecond
//     (see ExampleOptions_cachedClock).
//   - frozen: a constant, the floor of a decision without a clock.
func BenchmarkLimiterAllow(b *testing.B) {
	ctx := context.Background()
	alg := floodgate.TokenBucket{Rate: 1_000_000_000, Per: time.Hour, Burst: 1_000_000_000}
	fixed := time.Now()
	cached, stop := newCachedClock(time.Millisecond)
	defer stop()
	for _, c := range []struct {
		name string
		now  func() time.Time
	}{
		{"clock=default", nil},
		{"clock=time.Now", time.Now},
		{"clock=cached", cached},
		{"clock=frozen", func() time.Time { return fixed }},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, _ := memstore.New(&memstore.Options{Now: c.now})
			lim, err := floodgate.New(s, alg, testOpts)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d, err := lim.Allow(ctx, "key"); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// BenchmarkClock is the clock reads a decision may make: time.Now reads
// the wall and the monotonic clocks, time.Since of a time.Now only the
// monotonic one (the store's default clock), and a cached clock only
// memory.
func BenchmarkClock(b *testing.B) {
	base := time.Now()
	var sink int64
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
	})
	b.Run("time.Since", func(b *testing.B) {
		for b.Loop() {
			sink += int64(time.Since(base))
		}
	})
	cached, stop := newCachedClock(time.Millisecond)
	defer stop()
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			sink += cached().UnixNano()
		}
	})
	_ = sink
}

// BenchmarkCalendarWindow measures Allow on a CalendarWindow (a month in
// Asia/Tokyo) beside a FixedWindow of one day: the calendar's step
// computes its window with Go's time package on every decision, under the
// key's lock.
func BenchmarkCalendarWindow(b *testing.B) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		b.Fatal(err)
	}
	s, _ := memstore.New(nil)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		alg  floodgate.Algorithm
	}{
		{"FixedWindow", floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour}},
		{"CalendarWindow", floodgate.CalendarWindow{Limit: 1 << 40, Unit: floodgate.Month, Location: tokyo}},
	} {
		l, err := floodgate.New(s, c.alg, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Allow(ctx, "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
