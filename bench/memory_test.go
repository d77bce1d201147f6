package bench

import (
	"context"
	"runtime"
	"testing"
)

// memoryKeys is the number of keys the in-process memory scenario tracks.
func memoryKeys() int {
	if testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// redisMemoryKeys is the number of keys the Redis memory scenario writes.
func redisMemoryKeys() int {
	if testing.Short() {
		return 1_000
	}
	return 10_000
}

// BenchmarkMemoryPerKey reports the heap bytes each tracked key costs
// (metric B/key): the live heap after one decision on each of a million
// short keys (100,000 with -short), minus the live heap before, measured
// after a GC, under a quota of 100 per hour. The key strings themselves
// belong to the caller and are not counted. Run it with -benchtime 1x.
func BenchmarkMemoryPerKey(b *testing.B) {
	n := memoryKeys()
	keys := makeKeys("user:", n)
	for _, l := range inProcLibs() {
		b.Run(l.name, func(b *testing.B) {
			if l.skip != "" {
				b.Skip(l.skip)
			}
			var total float64
			runs := 0
			for b.Loop() {
				total += heapPerKey(b, l, keys)
				runs++
			}
			b.ReportMetric(total/float64(runs), "B/key")
		})
	}
}

// heapPerKey opens l, decides once on each key and returns the live heap
// that added per key.
func heapPerKey(b *testing.B, l inProc, keys []string) float64 {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allow, closeFn, err := l.open(memQuota)
	if err != nil {
		b.Fatalf("%s: %v", l.name, err)
	}
	for _, k := range keys {
		allow(k)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(allow)
	closeFn()
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(len(keys))
}

// BenchmarkRedisMemoryPerKey reports what each limiter key costs in Redis
// (metric B/key): the sum of MEMORY USAGE (SAMPLES 0) over every Redis key
// a library wrote for 10,000 limiter keys (1,000 with -short), one decision
// each under a quota of 100 per hour, divided by the number of limiter
// keys; rkeys/key is the number of Redis keys per limiter key. The limiter
// keys are about 20 bytes long. Run it with -benchtime 1x.
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	libs := append(floodgateRedisAlgorithms(), redisrateLib(), ululeRedisLib())
	n := redisMemoryKeys()
	for _, l := range libs {
		b.Run(l.name, func(b *testing.B) {
			const scenario = "mem"
			allow := openRemote(b, l, memQuota, scenario)
			c := newClient(b, redisAddr(b))
			defer c.Close()
			ctx := context.Background()
			var bytes, rkeys float64
			runs := 0
			for b.Loop() {
				deleteKeys(c, scenario)
				for i := range n {
					if _, err := allow(ctx, userKey(scenario, l.name, i)); err != nil {
						b.Fatal(err)
					}
				}
				keys, err := scanKeys(ctx, c, redisPattern(scenario))
				if err != nil {
					b.Fatal(err)
				}
				pipe := c.Pipeline()
				cmds := make([]interface{ Val() int64 }, len(keys))
				for i, k := range keys {
					cmds[i] = pipe.MemoryUsage(ctx, k, 0)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				var sum int64
				for _, cmd := range cmds {
					sum += cmd.Val()
				}
				bytes += float64(sum) / float64(n)
				rkeys += float64(len(keys)) / float64(n)
				runs++
			}
			b.ReportMetric(bytes/float64(runs), "B/key")
			b.ReportMetric(rkeys/float64(runs), "rkeys/key")
		})
	}
}
