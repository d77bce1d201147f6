package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	// accuracyInstances is the number of independent limiter instances
	// (each with its own Redis client, as separate processes would have).
	accuracyInstances = 4
	// accuracyRequests is the number of concurrent requests of a trial,
	// spread evenly over the instances and released at once.
	accuracyRequests = 1000
)

// accuracyLibs are the Redis-backed libraries of the accuracy scenario:
// every floodgate algorithm, the lease layer, and the peers.
func accuracyLibs() []remoteLib {
	return append(floodgateRedisAlgorithms(), floodgateLease(), redisrateLib(), ululeRedisLib())
}

// BenchmarkAccuracy runs trials of 1,000 concurrent requests, released
// together from 4 limiter instances sharing one Redis, against a quota of
// 100 on one fresh key. It reports the most requests any trial admitted
// (metric admitted; anything above 100 is over-admission) and the failed
// calls (metric errors). Run it with -benchtime 1x: each iteration is one
// trial.
func BenchmarkAccuracy(b *testing.B) {
	for _, l := range accuracyLibs() {
		b.Run(l.name, func(b *testing.B) {
			const scenario = "acc"
			if l.skip != "" {
				b.Skip(l.skip)
			}
			addr := redisAddr(b)
			instances := make([]func(context.Context, string) (bool, error), accuracyInstances)
			for i := range instances {
				c := newClient(b, addr)
				allow, closeFn, err := l.open(c, accuracyQuota)
				if err != nil {
					b.Fatalf("%s: %v", l.name, err)
				}
				instances[i] = allow
				b.Cleanup(func() {
					closeFn()
					deleteKeys(c, scenario)
					c.Close()
				})
			}
			var most, errs int64
			trial := 0
			for b.Loop() {
				admitted, failed, first := accuracyTrial(instances, userKey(scenario, l.name, trial))
				most = max(most, admitted)
				errs += failed
				if first != nil {
					b.Logf("trial %d: %d calls failed, the first with: %v", trial, failed, first)
				}
				trial++
			}
			b.ReportMetric(float64(most), "admitted")
			b.ReportMetric(float64(errs), "errors")
		})
	}
}

// accuracyTrial releases accuracyRequests goroutines at once, goroutine g
// deciding through instance g mod accuracyInstances, and counts the
// admitted requests and the failed calls, and returns the first error.
func accuracyTrial(instances []func(context.Context, string) (bool, error), key string) (admitted, failed int64, first error) {
	ctx := context.Background()
	var ok, bad atomic.Int64
	var once sync.Once
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range accuracyRequests {
		allow := instances[g%len(instances)]
		wg.Go(func() {
			<-start
			yes, err := allow(ctx, key)
			switch {
			case err != nil:
				bad.Add(1)
				once.Do(func() { first = err })
			case yes:
				ok.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return ok.Load(), bad.Load(), first
}
