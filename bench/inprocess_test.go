package bench

import (
	"sync/atomic"
	"testing"
)

// inProcLibs are the in-process libraries of the timed scenarios, floodgate
// first.
func inProcLibs() []inProc {
	return append(append(floodgateInProc(), floodgateWrapped()...), inProcPeers()...)
}

// inProcPeers are the in-process libraries floodgate is compared with.
func inProcPeers() []inProc {
	return []inProc{
		xtimerateLib(),
		sethvargoLib(),
		ululeLib(),
		httprateLib(),
		uberLib(),
	}
}

// openInProc opens l under q or skips or fails b.
func openInProc(b *testing.B, l inProc, q quota) func(string) bool {
	b.Helper()
	if l.skip != "" {
		b.Skip(l.skip)
	}
	allow, closeFn, err := l.open(q)
	if err != nil {
		b.Fatalf("%s: %v", l.name, err)
	}
	b.Cleanup(closeFn)
	return allow
}

// BenchmarkInProcessOneKeyAllowed is one key, one goroutine, under a quota
// that admits every call.
func BenchmarkInProcessOneKeyAllowed(b *testing.B) {
	for _, l := range inProcLibs() {
		b.Run(l.name, func(b *testing.B) {
			allow := openInProc(b, l, admitAll)
			allow("key")
			var calls, denied int64
			b.ReportAllocs()
			for b.Loop() {
				if !allow("key") {
					denied++
				}
				calls++
			}
			checkRegime(b, calls, denied, "admitted")
		})
	}
}

// BenchmarkInProcessOneKeyDenied is one key, one goroutine, under a quota
// that the warm-up call spends: every timed call is denied.
func BenchmarkInProcessOneKeyDenied(b *testing.B) {
	for _, l := range inProcLibs() {
		b.Run(l.name, func(b *testing.B) {
			if l.noDeny != "" && l.skip == "" {
				b.Skip(l.noDeny)
			}
			allow := openInProc(b, l, denyAll)
			allow("key")
			var calls, admitted int64
			b.ReportAllocs()
			for b.Loop() {
				if allow("key") {
					admitted++
				}
				calls++
			}
			checkRegime(b, calls, admitted, "denied")
		})
	}
}

// BenchmarkInProcess100kKeysParallel is 100,000 keys, each already tracked,
// decided from GOMAXPROCS goroutines that walk the keys from different
// starting points, under trackedQuota: every call is admitted and every key
// stays tracked.
func BenchmarkInProcess100kKeysParallel(b *testing.B) {
	keys := keys100k()
	for _, l := range inProcLibs() {
		b.Run(l.name, func(b *testing.B) {
			allow := openInProc(b, l, trackedQuota)
			for _, k := range keys {
				allow(k)
			}
			var seq atomic.Uint64
			var calls, denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := spread(&seq)
				var c, d int64
				for pb.Next() {
					i++
					if !allow(keys[i%uint64(len(keys))]) {
						d++
					}
					c++
				}
				calls.Add(c)
				denied.Add(d)
			})
			b.StopTimer()
			checkRegime(b, calls.Load(), denied.Load(), "admitted")
		})
	}
}

// BenchmarkInProcess100kKeysReclaimed is BenchmarkInProcess100kKeysParallel
// under reclaimedQuota: every key is fully restored between its calls, so
// a store that forgets restored keys to bound its memory (memstore's sweep
// on insertion) reclaims keys that are touched again. Every call is
// admitted.
func BenchmarkInProcess100kKeysReclaimed(b *testing.B) {
	keys := keys100k()
	for _, l := range inProcLibs() {
		b.Run(l.name, func(b *testing.B) {
			allow := openInProc(b, l, reclaimedQuota)
			for _, k := range keys {
				allow(k)
			}
			var seq atomic.Uint64
			var calls, denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := spread(&seq)
				var c, d int64
				for pb.Next() {
					i++
					if !allow(keys[i%uint64(len(keys))]) {
						d++
					}
					c++
				}
				calls.Add(c)
				denied.Add(d)
			})
			b.StopTimer()
			checkRegime(b, calls.Load(), denied.Load(), "admitted")
		})
	}
}
