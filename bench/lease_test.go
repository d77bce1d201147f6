package bench

import "testing"

// leaseLibs compares the lease layer with the plain store it leases from.
func leaseLibs() []remoteLib {
	libs := floodgateRedis()
	return []remoteLib{libs[0], floodgateLease()}
}

// BenchmarkLease64GoroutinesOneKey is 64 goroutines on one hot key: the
// case the lease layer is for.
func BenchmarkLease64GoroutinesOneKey(b *testing.B) {
	for _, l := range leaseLibs() {
		b.Run(l.name, func(b *testing.B) {
			runRemoteParallel(b, l, "lease1", 1)
		})
	}
}

// BenchmarkLease64Goroutines1000Keys is 64 goroutines over the 1,000 keys
// of BenchmarkRedis64Goroutines: each key is leased separately.
func BenchmarkLease64Goroutines1000Keys(b *testing.B) {
	for _, l := range leaseLibs() {
		b.Run(l.name, func(b *testing.B) {
			runRemoteParallel(b, l, "lease1000", redisKeyCount)
		})
	}
}
