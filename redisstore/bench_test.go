package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/step"
)

// benchAlgs are the configurations benchmarked: quotas large enough that
// most decisions admit (and write), as under normal traffic.
var benchAlgs = []floodgate.Algorithm{
	floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 1000},
	floodgate.LeakyBucket{Rate: 1000, Per: time.Second, Capacity: 1000},
	floodgate.FixedWindow{Limit: 1000, Window: time.Second},
	floodgate.SlidingWindow{Limit: 1000, Window: time.Second},
	floodgate.SlidingLog{Limit: 100, Window: time.Second},
}

// benchClient returns a client of the Redis at REDIS_ADDR, or skips.
func benchClient(b *testing.B, pool int) *redis.Client {
	b.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("set REDIS_ADDR to benchmark on a real Redis")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: pool})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkStoreApply measures one decision on a real Redis, through the
// store bound to the algorithm as floodgate.New binds it: the latency of
// serial decisions, and the throughput of 64 goroutines, each sending its
// own decisions (unbatched) or letting the store pipeline them (batched).
// Keys are spread over 10,000 per algorithm.
func BenchmarkStoreApply(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "bench:" + strconv.Itoa(i)
	}
	for _, alg := range benchAlgs {
		for _, mode := range []struct {
			name        string
			parallelism int // goroutines
		}{{"serial", 1}, {"parallel64", 64}} {
			for _, batch := range []int{1, 64} {
				name := fmt.Sprintf("%v/%s/unbatched", kindOf(alg), mode.name)
				if batch > 1 {
					name = fmt.Sprintf("%v/%s/batched", kindOf(alg), mode.name)
				}
				b.Run(name, func(b *testing.B) {
					c := benchClient(b, mode.parallelism+8)
					s, err := New(c, &Options{Prefix: "fgbench:", Timeout: time.Second, BatchSize: batch})
					require.NoError(b, err)
					b.Cleanup(func() { _ = s.Close(); deleteKeys(b, c, "fgbench:") })
					// Bound, as floodgate.New binds it: the path a Limiter's
					// decisions take.
					bnd, err := s.Bind(testName, alg)
					require.NoError(b, err)
					req := floodgate.Request{Op: floodgate.OpTake, N: 1}
					var seq atomic.Int64
					var errs atomic.Int64
					b.ReportAllocs()
					start := time.Now()
					if mode.parallelism == 1 {
						i := 0
						for b.Loop() {
							if _, err := bnd.Apply(context.Background(), names[i%keys], req, nil); err != nil {
								errs.Add(1)
							}
							i++
						}
					} else {
						b.SetParallelism(max(mode.parallelism/runtimeProcs(), 1))
						b.RunParallel(func(pb *testing.PB) {
							i := int(seq.Add(7919))
							for pb.Next() {
								if _, err := bnd.Apply(context.Background(), names[i%keys], req, nil); err != nil {
									errs.Add(1)
								}
								i++
							}
						})
					}
					b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
					require.Zero(b, errs.Load(), "failed decisions")
				})
			}
		}
	}
}

// BenchmarkStoreLimits compares, on a real Redis and in one run, serial
// decisions of a Limits of two limits (a token bucket and a fixed window,
// neither binding) with decisions of each limit alone, through stores
// bound as floodgate.New binds them: each decision is one round trip.
// Keys are spread over 10,000. It reports Redis' time per script call
// (INFO commandstats, usec_per_call of EVALSHA) beside the latency.
func BenchmarkStoreLimits(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "bench:" + strconv.Itoa(i)
	}
	tb := floodgate.TokenBucket{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
	fw := floodgate.FixedWindow{Limit: 1_000_000, Window: time.Second}
	for _, bc := range []struct {
		name string
		alg  floodgate.Algorithm
	}{{"One/tb", tb}, {"One/fw", fw}, {"Limits/tb+fw", floodgate.Limits{tb, fw}}} {
		b.Run(bc.name, func(b *testing.B) { benchSerialTakes(b, bc.alg, names, "fgbench:limits:") })
	}
}

// benchSerialTakes makes serial takes of one unit of alg over the keys
// names in turn, each admitted, through a store bound as floodgate.New
// binds it (one round trip each), and reports Redis' time per script call
// (INFO commandstats) beside the latency.
func benchSerialTakes(b *testing.B, alg floodgate.Algorithm, names []string, prefix string) {
	c := benchClient(b, 8)
	s, err := New(c, &Options{Prefix: prefix, Timeout: time.Second})
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close(); deleteKeys(b, c, prefix) })
	bnd, err := s.Bind(testName, alg)
	require.NoError(b, err)
	req := floodgate.Request{Op: floodgate.OpTake, N: 1}
	ctx := context.Background()
	_, err = bnd.Apply(ctx, names[0], req, nil) // loads the script
	require.NoError(b, err)
	before := evalshaStats(b, c)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		res, err := bnd.Apply(ctx, names[i%len(names)], req, nil)
		if err != nil || !res.Allowed {
			b.Fatalf("Apply: %+v, %v", res, err)
		}
		i++
	}
	after := evalshaStats(b, c)
	if calls := after[0] - before[0]; calls > 0 {
		b.ReportMetric((after[1]-before[1])/calls, "redis-µs/call")
	}
}

// evalshaStats returns EVALSHA's calls and the microseconds Redis spent in
// them, from INFO commandstats.
func evalshaStats(b *testing.B, c *redis.Client) [2]float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(b, err)
	var calls, usec float64
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "calls":
					calls, _ = strconv.ParseFloat(v, 64)
				case "usec":
					usec, _ = strconv.ParseFloat(v, 64)
				}
			}
		}
	}
	return [2]float64{calls, usec}
}

// TestMemoryUsage reports the bytes Redis spends per key and algorithm
// (MEMORY USAGE, which counts the key, the value and the allocator's
// overhead), and checks that the sliding log stays within a bound per
// entry. It needs a real Redis.
func TestMemoryUsage(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		t.Skip("set REDIS_ADDR to measure memory on a real Redis")
	}
	srv := newServer(t)
	c := srv.client(t)
	s := newStore(t, c, nil)
	ctx := context.Background()
	usage := func(key string, kind step.Kind) int64 {
		n, err := c.MemoryUsage(ctx, s.Key(testName, key, kind)).Result()
		require.NoError(t, err)
		return n
	}
	for _, alg := range benchAlgs[:4] {
		_, err := applyOnce(ctx, s, "user:1234567", alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
		require.NoError(t, err)
		t.Logf("%v: %d bytes per key", alg, usage("user:1234567", kindOf(alg)))
	}
	for _, entries := range []int64{1, 10, 100, 1000} {
		alg := floodgate.SlidingLog{Limit: entries, Window: time.Hour}
		key := "log:" + strconv.FormatInt(entries, 10)
		for range entries {
			res, err := applyOnce(ctx, s, key, alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
			require.NoError(t, err)
			require.True(t, res.Allowed)
		}
		n := usage(key, kindOf(alg))
		t.Logf("%v full (%d entries): %d bytes, %.1f per entry", alg, entries, n, float64(n)/float64(entries))
		require.Less(t, n, 200+160*entries, "memory per entry")
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkStoreFanIn is 512 goroutines sharing one store with the default
// Timeout (20ms), on a client with go-redis' default options: many more
// callers than the store's MaxInFlight slots, so decisions wait for a slot,
// and that wait counts against the timeout. It reports the share of
// decisions that timed out (timeouts/1k), which is what Options.Timeout's
// documentation quotes.
func BenchmarkStoreFanIn(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("set REDIS_ADDR to benchmark on a real Redis")
	}
	alg := floodgate.TokenBucket{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
	for _, batch := range []int{1, 64} {
		b.Run(map[bool]string{true: "batched", false: "unbatched"}[batch > 1], func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { _ = c.Close() })
			s, err := New(c, &Options{Prefix: "fgbench:fanin:", BatchSize: batch})
			require.NoError(b, err)
			b.Cleanup(func() { _ = s.Close(); deleteKeys(b, c, "fgbench:fanin:") })
			bnd, err := s.Bind(testName, alg)
			require.NoError(b, err)
			req := floodgate.Request{Op: floodgate.OpTake, N: 1}
			var seq, timeouts, others atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(max(512/runtimeProcs(), 1))
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(7919))
				for pb.Next() {
					_, err := bnd.Apply(context.Background(), "fanin:"+strconv.Itoa(i%1000), req, nil)
					switch {
					case errors.Is(err, ErrTimeout):
						timeouts.Add(1)
					case err != nil:
						others.Add(1)
					}
					i++
				}
			})
			b.ReportMetric(1000*float64(timeouts.Load())/float64(b.N), "timeouts/1k")
			b.ReportMetric(1000*float64(others.Load())/float64(b.N), "errors/1k")
		})
	}
}

// BenchmarkStoreFailOpen measures a FailOpen decision of an open breaker
// (nothing listens at the address), serial and from every CPU at once,
// unobserved and with an Observer that counts the failures: during an
// outage these decisions are what a store makes, and the failures'
// counting must neither allocate nor serialize them.
func BenchmarkStoreFailOpen(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	addr := ln.Addr().String()
	require.NoError(b, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1, PoolSize: 100_000})
	b.Cleanup(func() { _ = c.Close() })
	var failures atomic.Int64
	for _, tc := range []struct {
		name string
		o    *observe.Observer
	}{
		{"plain", nil},
		{"observed", &observe.Observer{OnFailures: func(_ context.Context, f observe.Failures) { failures.Add(f.Count) }}},
	} {
		for _, parallel := range []bool{false, true} {
			b.Run(tc.name+map[bool]string{false: "/serial", true: "/parallel"}[parallel], func(b *testing.B) {
				s, err := New(c, &Options{Prefix: "fgbench:", OnFailure: FailOpen, BreakerCooldown: time.Hour, Observer: tc.o})
				require.NoError(b, err)
				b.Cleanup(func() { _ = s.Close() })
				lim, err := floodgate.New(s, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, testOpts)
				require.NoError(b, err)
				ctx := context.Background()
				for s.BreakerState("k") != BreakerOpen {
					_, _ = lim.Allow(ctx, "k")
				}
				b.ReportAllocs()
				if !parallel {
					for b.Loop() {
						_, _ = lim.Allow(ctx, "k")
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _ = lim.Allow(ctx, "k")
					}
				})
			})
		}
	}
}

// mutexCount is failCount as a mutex would make it, for
// BenchmarkFailCount.
type mutexCount struct {
	mu    sync.Mutex
	n     int64
	first error
}

func (c *mutexCount) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first == nil {
		c.first = err
	}
	c.n++
}

// BenchmarkFailCount compares the counting of a failed decision with
// atomics (failCount, the store's) and under a mutex, from every CPU at
// once on one counter, as an outage's decisions on one node count.
func BenchmarkFailCount(b *testing.B) {
	b.Run("atomic", func(b *testing.B) {
		var c failCount
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.add(errBreakerOpen)
			}
		})
	})
	b.Run("mutex", func(b *testing.B) {
		var c mutexCount
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.add(errBreakerOpen)
			}
		})
	})
}

// BenchmarkSubWindows compares, on a real Redis and in one run, serial
// takes of the two-counter sliding window with the sliding window of S
// sub-windows (Limit 1,000,000 per minute, never binding), on one hot key
// and spread over 10,000 keys (each decision then moves its key to a new
// sub-window: the O(S) path). It reports Redis' time per script call (INFO
// commandstats, usec_per_call of EVALSHA) beside the latency.
func BenchmarkSubWindows(b *testing.B) {
	for _, keys := range []int{1, 10_000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = "bench:" + strconv.Itoa(i)
		}
		for _, s := range []int{1, 4, 10, 60} {
			alg := floodgate.SlidingWindow{Limit: 1_000_000, Window: time.Minute, SubWindows: s}
			b.Run(fmt.Sprintf("keys=%d/S=%d", keys, s), func(b *testing.B) { benchSerialTakes(b, alg, names, "fgbench:sub:") })
		}
	}
}

// BenchmarkSubWindowsPaired measures what the bar compares, the
// sub-window script's Redis time at S = 60 against the two-counter sliding
// window's, on a redis-server of its own (so no other client's calls are
// counted) and in rounds that alternate the two configurations, so that
// load from elsewhere on the machine falls on both alike. Each round makes
// 20,000 serial takes per configuration (on one hot key, then over 10,000
// keys, where each decision moves its key to a new sub-window) and reads
// per call: INFO commandstats' usec of EVALSHA (the time Redis spends in
// the call, on the wall clock) and INFO cpu's main-thread CPU time (user +
// sys: the script, the reply and the socket I/O, not counting time the
// thread was descheduled). It reports the median ratio S = 60 / S = 1 of
// each over the rounds, and logs every round.
//
//	go test ./redisstore -run '^$' -bench BenchmarkSubWindowsPaired -benchtime 1x -v
func BenchmarkSubWindowsPaired(b *testing.B) {
	p := startRedisProc(b)
	c := redis.NewClient(&redis.Options{Addr: p.addr()})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const rounds, takes = 7, 20_000
	for _, keys := range []int{1, 10_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			names := make([]string, keys)
			for i := range names {
				names[i] = "bench:" + strconv.Itoa(i)
			}
			var usecRatio, cpuRatio []float64
			for r := range rounds {
				var usec, cpu [2]float64
				for k := range 2 {
					// Alternate which configuration goes first.
					i := (k + r) % 2
					alg := floodgate.SlidingWindow{Limit: 1_000_000, Window: time.Minute, SubWindows: []int{1, 60}[i]}
					s, err := New(c, &Options{Prefix: fmt.Sprintf("fgpair:%d:%d:", r, i), Timeout: time.Second})
					require.NoError(b, err)
					bnd, err := s.Bind(testName, alg)
					require.NoError(b, err)
					req := floodgate.Request{Op: floodgate.OpTake, N: 1}
					_, err = bnd.Apply(ctx, names[0], req, nil) // loads the script
					require.NoError(b, err)
					st0, cpu0 := evalshaStats(b, c), mainThreadCPU(b, c)
					for j := range takes {
						res, err := bnd.Apply(ctx, names[j%keys], req, nil)
						if err != nil || !res.Allowed {
							b.Fatalf("Apply: %+v, %v", res, err)
						}
					}
					st1, cpu1 := evalshaStats(b, c), mainThreadCPU(b, c)
					calls := st1[0] - st0[0]
					usec[i], cpu[i] = (st1[1]-st0[1])/calls, (cpu1-cpu0)*1e6/calls
					_ = s.Close()
				}
				b.Logf("round %d: S = 1 %.2f µs in the call, %.2f µs CPU; S = 60 %.2f, %.2f: %.2f×, %.2f×",
					r, usec[0], cpu[0], usec[1], cpu[1], usec[1]/usec[0], cpu[1]/cpu[0])
				usecRatio, cpuRatio = append(usecRatio, usec[1]/usec[0]), append(cpuRatio, cpu[1]/cpu[0])
				require.NoError(b, c.FlushAll(ctx).Err())
			}
			slices.Sort(usecRatio)
			slices.Sort(cpuRatio)
			b.ReportMetric(usecRatio[rounds/2], "usec-ratio")
			b.ReportMetric(cpuRatio[rounds/2], "cpu-ratio")
			b.Logf("median S = 60 / S = 1 over %d rounds: %.2f× commandstats usec (range %.2f–%.2f), %.2f× main-thread CPU (range %.2f–%.2f)",
				rounds, usecRatio[rounds/2], usecRatio[0], usecRatio[rounds-1], cpuRatio[rounds/2], cpuRatio[0], cpuRatio[rounds-1])
		})
	}
}

// mainThreadCPU returns the CPU seconds (user + sys) of Redis' main thread
// from INFO cpu.
func mainThreadCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	require.NoError(b, err)
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(b, err)
			sum += f
			found++
		}
	}
	require.Equal(b, 2, found, "INFO cpu without the main thread's CPU (Redis 6.2 or later has it)")
	return sum
}
