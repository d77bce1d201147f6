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

// memoryLibs are the libraries of the in-process memory scenario: each of
// floodgate's algorithms, then the peers.
func memoryLibs() []inProc { return append(floodgateMemAlgorithms(), inProcPeers()...) }

// BenchmarkMemoryPerKey reports the heap bytes each tracked key costs
// (metric B/key): the live heap after one decision on each of a million
// keys "user:0" to "user:999999" (100,000 with -short), minus the live heap
// before, measured after a GC, under a quota of 100 per hour. The caller's
// key strings are not counted; a copy a library makes is (memstore copies
// each key it tracks: 16 B for most of these keys). Run it with
// -benchtime 1x; TestMemoryPerKey holds floodgate's figures to bounds.
func BenchmarkMemoryPerKey(b *testing.B) {
	n := memoryKeys()
	keys := makeKeys("user:", n)
	for _, l := range memoryLibs() {
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
func heapPerKey(tb testing.TB, l inProc, keys []string) float64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allow, closeFn, err := l.open(memQuota)
	if err != nil {
		tb.Fatalf("%s: %v", l.name, err)
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

// TestMemoryPerKey logs floodgate's heap bytes per key on memstore for each
// algorithm, measured as BenchmarkMemoryPerKey measures them (the same keys,
// quota and function), and fails if a figure exceeds its bound. It takes
// about half a minute on two cores; -short measures 100,000 keys instead of
// a million (the figures are then 4 to 5 B lower: the tables are emptier).
//
//	cd bench && go test -run '^TestMemoryPerKey$' -v .
//
// memstore's own TestHeapPerKey is a cheap version of this, on 20,000 keys.
func TestMemoryPerKey(t *testing.T) {
	// The bounds are the figures measured at 1,000,000 keys (Go 1.26,
	// amd64) plus about an eighth: one more word per key fails the
	// buckets' and the fixed window's bounds. A fixed window entry also
	// carries its packing and a pointer for a state moved under a mutex
	// (since state is per key and kind: 56.8 B before). A sliding log
	// holds one entry here (one decision).
	bounds := map[string]float64{
		"floodgate":               64,  // measured 56.8
		"floodgate-leakybucket":   64,  // measured 56.8
		"floodgate-fixedwindow":   88,  // measured 80.8
		"floodgate-slidingwindow": 112, // measured 96.8
		"floodgate-slidinglog":    200, // measured 176.8
	}
	keys := makeKeys("user:", memoryKeys())
	for _, l := range floodgateMemAlgorithms() {
		per := heapPerKey(t, l, keys)
		t.Logf("%s: %.1f B per key (%d keys)", l.name, per, len(keys))
		bound, ok := bounds[l.name]
		if !ok {
			t.Errorf("%s: no bound", l.name)
			continue
		}
		if per > bound {
			t.Errorf("%s: %.1f B per key, want at most %.0f", l.name, per, bound)
		}
	}
}
