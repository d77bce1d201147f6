package lease_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/step"
)

// The benchmark algorithms never run out within a benchmark: every decision
// is admitted, so the benchmarks measure the cost of deciding. A window
// algorithm's local decision also reads the clock (see the package doc).
var (
	benchAlgorithm       = floodgate.TokenBucket{Rate: 1_000_000_000, Per: time.Second, Burst: 1_000_000_000}
	benchWindowAlgorithm = floodgate.FixedWindow{Limit: 1 << 50, Window: 30 * 24 * time.Hour}
)

// reportRoundTrips reports, between two snapshots, the fraction of
// decisions that needed a round trip (they waited for a lease or went to
// the remote) and the lease round trips per decision (most of them in the
// background, waited for by no one).
func reportRoundTrips(b *testing.B, before, after lease.Stats) {
	b.Helper()
	local := after.Local - before.Local
	needed := after.Waited - before.Waited + after.Forwarded - before.Forwarded
	if total := local + needed; total > 0 {
		b.ReportMetric(float64(needed)/float64(total), "roundtrip-frac")
		b.ReportMetric(float64(after.Leases-before.Leases)/float64(total), "leases/op")
	}
}

// cpuMeter reports the CPU time per operation of a benchmark as cpu-ns/op:
// on a machine shared with other work, wall-clock ns/op counts the time the
// benchmark waits for a core, while CPU time counts only what it used.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	t, ok := cpuTime()
	return cpuMeter{start: t, ok: ok}
}

func (m cpuMeter) report(b *testing.B) {
	b.Helper()
	if t, ok := cpuTime(); ok && m.ok && b.N > 0 {
		b.ReportMetric(float64(t-m.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkLimiterAllow measures the decisions of a floodgate.Limiter on
// a lease Store: over an in-process remote (memstore), the cost of a local
// decision including the amortized refills, serially and from every core
// at once on one key; and end to end over Redis (REDIS_ADDR, else
// miniredis) with 64 goroutines on one key, against a limiter on the plain
// Redis store in the same run.
func BenchmarkLimiterAllow(b *testing.B) {
	ctx := context.Background()
	newMem := func(b *testing.B, alg floodgate.Algorithm) leased {
		b.Helper()
		store, err := memstore.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		ls, err := lease.New(store, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ls.Close() })
		lim, err := floodgate.New(ls, alg, &floodgate.Options{Name: testName})
		if err != nil {
			b.Fatal(err)
		}
		l := leased{Limiter: lim, Store: ls}
		// Warm up: the batch grows to its steady size.
		for range 100_000 {
			_, _ = l.Allow(ctx, "key")
		}
		return l
	}

	for _, alg := range []floodgate.Algorithm{benchAlgorithm, benchWindowAlgorithm} {
		b.Run(algName(alg)+"/serial", func(b *testing.B) {
			l := newMem(b, alg)
			before := l.Stats()
			b.ReportAllocs()
			var cpu cpuMeter
			for b.Loop() {
				if cpu == (cpuMeter{}) {
					cpu = startCPU()
				}
				if d, err := l.Allow(ctx, "key"); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
			cpu.report(b)
			reportRoundTrips(b, before, l.Stats())
		})

		b.Run(algName(alg)+"/parallel", func(b *testing.B) {
			l := newMem(b, alg)
			before := l.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := l.Allow(ctx, "key"); err != nil || !d.Allowed {
						b.Error(d, err)
						return
					}
				}
			})
			cpu.report(b)
			reportRoundTrips(b, before, l.Stats())
		})
	}

	// End to end over Redis, 64 goroutines on one key.
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		addr = m.Addr()
	}
	newRemote := func(b *testing.B) floodgate.Store {
		b.Helper()
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
		b.Cleanup(func() { _ = c.Close() })
		// Timeouts for throughput, not latency: on a loaded machine Redis
		// itself waits for a core. The keys of each run are its own and
		// expire with their TTL.
		prefix := "fgbench:lease:" + time.Now().Format("150405.000000000") + ":"
		store, err := redisstore.New(c, &redisstore.Options{Prefix: prefix, Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = store.Close() })
		return store
	}
	newLimiter := func(b *testing.B, store floodgate.Store) *floodgate.Limiter {
		b.Helper()
		lim, err := floodgate.New(store, benchAlgorithm, &floodgate.Options{Name: testName})
		if err != nil {
			b.Fatal(err)
		}
		return lim
	}
	run64 := func(b *testing.B, lim *floodgate.Limiter) {
		var errs atomic.Int64
		var first atomic.Value
		b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := lim.Allow(ctx, "key"); err != nil || !d.Allowed {
					if errs.Add(1) == 1 {
						first.Store(fmt.Sprintf("Allow = %+v, %v", d, err))
					}
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		if n := errs.Load(); n > 0 {
			b.Errorf("%d of %d decisions failed or were denied; the first: %v", n, b.N, first.Load())
		}
	}
	b.Run("redis/64goroutines/plain", func(b *testing.B) {
		run64(b, newLimiter(b, newRemote(b)))
	})
	b.Run("redis/64goroutines/lease", func(b *testing.B) {
		ls, err := lease.New(newRemote(b), &lease.Options{Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ls.Close() })
		before := ls.Stats()
		run64(b, newLimiter(b, ls))
		reportRoundTrips(b, before, ls.Stats())
	})
}

// algName names the kind of a in test names.
func algName(a floodgate.Algorithm) string { k, _ := step.KindOf(a); return k.String() }
