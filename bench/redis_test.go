package bench

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisLibs are the libraries of the latency and throughput scenarios,
// floodgate first.
func redisLibs() []remoteLib {
	return append(floodgateRedis(), redisrateLib(), ululeRedisLib(), baselinePing())
}

// baselinePing is not a limiter: a PING on the same client, the round-trip
// floor of any decision.
func baselinePing() remoteLib {
	return remoteLib{name: "baseline-ping", open: func(c redis.UniversalClient, _ quota) (func(context.Context, string) (bool, error), func(), error) {
		allow := func(ctx context.Context, _ string) (bool, error) {
			return true, c.Ping(ctx).Err()
		}
		return allow, func() {}, nil
	}}
}

// goroutines64 is the concurrency of the throughput scenarios.
const goroutines64 = 64

// redisKeyCount is the number of keys the 64 goroutines spread over.
const redisKeyCount = 1000

// openRemote connects to REDIS_ADDR and opens l under q, or skips b. The
// keys b writes are deleted when it ends.
func openRemote(b *testing.B, l remoteLib, q quota, scenario string) func(context.Context, string) (bool, error) {
	b.Helper()
	if l.skip != "" {
		b.Skip(l.skip)
	}
	c := newClient(b, redisAddr(b))
	b.Cleanup(func() {
		deleteKeys(c, scenario)
		c.Close()
	})
	allow, closeFn, err := l.open(c, q)
	if err != nil {
		b.Fatalf("%s: %v", l.name, err)
	}
	b.Cleanup(closeFn)
	return allow
}

// BenchmarkRedisSerial is one decision at a time on one key: the latency
// of a decision, a round trip to Redis included.
func BenchmarkRedisSerial(b *testing.B) {
	for _, l := range redisLibs() {
		b.Run(l.name, func(b *testing.B) {
			const scenario = "serial"
			allow := openRemote(b, l, admitAll, scenario)
			ctx := context.Background()
			key := userKey(scenario, l.name, 0)
			if _, err := allow(ctx, key); err != nil {
				b.Fatal(err)
			}
			var calls, denied, failed int64
			var first error
			b.ReportAllocs()
			for b.Loop() {
				ok, err := allow(ctx, key)
				switch {
				case err != nil:
					failed++
					if first == nil {
						first = err
					}
				case !ok:
					denied++
				}
				calls++
			}
			checkFailures(b, calls, failed, first)
			checkRegime(b, calls, denied, "admitted")
		})
	}
}

// BenchmarkRedis64Goroutines is 64 goroutines deciding on 1,000 keys: the
// throughput of one process against one Redis.
func BenchmarkRedis64Goroutines(b *testing.B) {
	for _, l := range redisLibs() {
		b.Run(l.name, func(b *testing.B) {
			runRemoteParallel(b, l, "par64", redisKeyCount)
		})
	}
}

// runRemoteParallel runs l from 64 goroutines over n keys.
func runRemoteParallel(b *testing.B, l remoteLib, scenario string, n int) {
	b.Helper()
	allow := openRemote(b, l, admitAll, scenario)
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = userKey(scenario, l.name, i)
		if _, err := allow(ctx, keys[i]); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Uint64
	var calls, denied, failed atomic.Int64
	var first atomic.Pointer[error]
	b.ReportAllocs()
	b.SetParallelism(max(1, goroutines64/gomaxprocs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := spread(&seq)
		var c, d, f int64
		for pb.Next() {
			i++
			ok, err := allow(ctx, keys[i%uint64(n)])
			switch {
			case err != nil:
				f++
				first.CompareAndSwap(nil, &err)
			case !ok:
				d++
			}
			c++
		}
		calls.Add(c)
		denied.Add(d)
		failed.Add(f)
	})
	b.StopTimer()
	var firstErr error
	if e := first.Load(); e != nil {
		firstErr = *e
	}
	checkFailures(b, calls.Load(), failed.Load(), firstErr)
	checkRegime(b, calls.Load(), denied.Load(), "admitted")
}

// checkFailures reports failed calls. A few (at most one in a thousand,
// say timeouts on a machine busy with other work) are logged and reported
// as the metric failed/op; more fail the benchmark.
func checkFailures(b *testing.B, calls, failed int64, first error) {
	b.Helper()
	if failed == 0 {
		return
	}
	b.ReportMetric(float64(failed)/float64(calls), "failed/op")
	if failed*1000 > calls {
		b.Fatalf("%d of %d calls failed, the first with: %v", failed, calls, first)
	}
	b.Logf("%d of %d calls failed, the first with: %v", failed, calls, first)
}
