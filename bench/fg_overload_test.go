//go:build !nofg_redisstore

package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/redisstore"
)

// The overload scenarios of floodgate's Redis store (issue 24): fan-in
// from 512 goroutines, a Limits of two at 64 goroutines, and package
// inflight's holds under contention. The peers have no Limits and no
// distributed in-flight limiter; redis_rate runs the fan-in beside
// floodgate.

// BenchmarkRedisFanIn512 is 512 goroutines deciding at once on 1,000 keys
// through a client built with go-redis' default options (a pool of 10
// connections per CPU) and the store's defaults: ns/op is wall time per
// decision, and timeouts/op the share of decisions that failed with
// redisstore.ErrTimeout (the bench fails above one in a thousand).
func BenchmarkRedisFanIn512(b *testing.B) {
	for _, l := range []remoteLib{fgRedis("floodgate", redisstore.Options{}, false, tokenBucket), redisrateLib()} {
		b.Run(l.name, func(b *testing.B) {
			if l.skip != "" {
				b.Skip(l.skip)
			}
			const scenario = "fanin"
			c := redis.NewClient(&redis.Options{Addr: redisAddr(b)})
			b.Cleanup(func() {
				deleteKeys(c, scenario)
				c.Close()
			})
			allow, closeFn, err := l.open(c, admitAll)
			if err != nil {
				b.Fatalf("%s: %v", l.name, err)
			}
			b.Cleanup(closeFn)
			runParallel(b, allow, scenario, l.name, redisKeyCount, 512)
		})
	}
}

// BenchmarkRedisLimits64Goroutines is 64 goroutines on 1,000 keys deciding
// a Limits of two limits (a token bucket and a fixed window, neither
// binding: one script call on two Redis keys) against one limit alone
// (the token bucket), both on the default store.
func BenchmarkRedisLimits64Goroutines(b *testing.B) {
	two := func(q quota) floodgate.Algorithm {
		return floodgate.Limits{tokenBucket(q), fixedWindow(q)}
	}
	for _, l := range []remoteLib{fgRedis("floodgate", redisstore.Options{}, false, tokenBucket), fgRedis("floodgate-limits2", redisstore.Options{}, false, two)} {
		b.Run(l.name, func(b *testing.B) {
			runRemoteParallel(b, l, "limits64", redisKeyCount)
		})
	}
}

// BenchmarkRedisInflightContention is 8 stores (each with its own client,
// as 8 processes would have) × 64 goroutines acquiring one key of
// package inflight's limit 8 (defaults), each holder keeping its slot
// 50ms and each denied caller retrying at once. ns/op is wall time per
// admission; held/8 is the mean number of slots the holders held,
// sampled every 5ms (8 when the limiter never leaves a slot idle while
// callers wait), and denied/op and errors/op the Acquires per admission
// that were denied or failed.
func BenchmarkRedisInflightContention(b *testing.B) {
	b.Run("floodgate", func(b *testing.B) {
		const stores, goroutines, limit, holdFor, scenario = 8, 64, 8, 50 * time.Millisecond, "inflight"
		addr := redisAddr(b)
		lims := make([]*inflight.Limiter, stores)
		for i := range lims {
			c := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { c.Close() })
			s, err := redisstore.New(c, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			if lims[i], err = inflight.New(s, limit, nil); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { lims[i].Close() })
		}
		key := userKey(scenario, "floodgate", 0)
		var (
			admitted, denied, failed, holders atomic.Int64
			done                              = make(chan struct{})
			wg                                sync.WaitGroup
		)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range stores {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						slot, err := lims[i].Acquire(context.Background(), key)
						switch {
						case err != nil:
							failed.Add(1)
						case !slot.Allowed:
							denied.Add(1)
						default:
							holders.Add(1)
							if admitted.Add(1) == int64(b.N) {
								close(done)
							}
							time.Sleep(holdFor)
							holders.Add(-1)
							_ = slot.Release(context.Background())
						}
					}
				}()
			}
		}
		var samples, held int64
		tick := time.NewTicker(5 * time.Millisecond)
	sample:
		for {
			select {
			case <-done:
				break sample
			case <-tick.C:
				samples++
				held += holders.Load()
			}
		}
		tick.Stop()
		b.StopTimer()
		wg.Wait()
		if samples > 0 {
			b.ReportMetric(float64(held)/float64(samples), "held/8")
		}
		b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
		b.ReportMetric(float64(failed.Load())/float64(b.N), "errors/op")
	})
}

// runParallel runs allow from goroutines goroutines over n keys, counting
// timeouts apart.
func runParallel(b *testing.B, allow func(context.Context, string) (bool, error), scenario, lib string, n, goroutines int) {
	b.Helper()
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = userKey(scenario, lib, i)
		if _, err := allow(ctx, keys[i]); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Uint64
	var calls, timeouts, failed atomic.Int64
	var first atomic.Pointer[error]
	b.ReportAllocs()
	b.SetParallelism(max(1, goroutines/gomaxprocs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := spread(&seq)
		var c, t, f int64
		for pb.Next() {
			i++
			_, err := allow(ctx, keys[i%uint64(n)])
			switch {
			case errors.Is(err, redisstore.ErrTimeout):
				t++
			case err != nil:
				f++
				first.CompareAndSwap(nil, &err)
			}
			c++
		}
		calls.Add(c)
		timeouts.Add(t)
		failed.Add(f)
	})
	b.StopTimer()
	b.ReportMetric(float64(timeouts.Load())/float64(calls.Load()), "timeouts/op")
	var firstErr error
	if e := first.Load(); e != nil {
		firstErr = *e
	}
	checkFailures(b, calls.Load(), failed.Load()+timeouts.Load(), firstErr)
}
