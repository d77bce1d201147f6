// Package bench compares floodgate with the Go rate limiters users would
// otherwise choose, side by side in one `go test -bench` run. It is a module
// of its own so that the peers and the plotting library never enter
// floodgate's dependency graph.
//
// Every benchmark is named Benchmark<Scenario>/<library>. The in-process
// scenarios also run floodgate's token bucket through its wrappers:
// floodgate-observed (observe.Store with a Tally, what the metrics
// adapters install) and floodgate-leased (lease.New over memstore: the
// pool's own cost without Redis; a denial there asks the store each time).
//
//	InProcessOneKeyAllowed     one key, serial, a quota that admits every call
//	InProcessOneKeyDenied      one key, serial, a spent quota that denies every call
//	InProcess100kKeysParallel  100,000 keys, RunParallel, admitting quota
//	InProcess100kKeysReclaimed 100,000 keys, RunParallel, a quota that
//	                           restores each key between its calls
//	RedisSerial                one decision at a time against Redis (latency)
//	Redis64Goroutines          64 goroutines against Redis (throughput)
//	RedisFanIn512              512 goroutines, a default-options client
//	                           (metric timeouts/op)
//	RedisLimits64Goroutines    a Limits of two against one limit, 64 goroutines
//	RedisInflightContention    8 stores x 64 goroutines on one in-flight key
//	                           of limit 8 (metric held/8)
//	Lease64Goroutines          the lease layer against plain Redis, 64 goroutines
//	AdaptiveSerial, AdaptiveParallel   adaptive Acquire followed by Success
//	MemoryPerKey               heap bytes per tracked key (metric B/key), each
//	                           of floodgate's five algorithms and the peers
//	RedisMemoryPerKey          Redis MEMORY USAGE per key (metric B/key)
//	Accuracy                   4 limiter instances on one Redis, 1,000
//	                           concurrent requests, quota 100 (metric admitted)
//
// The tests (not benchmarks) of slidingwindow_test.go measure the sliding
// window counter against the exact sliding log on virtual time and assert
// the figures docs/algorithms.md states:
//
//	cd bench && go test -count=1 -run '^TestSlidingWindow' -v .
//
// The Redis scenarios need REDIS_ADDR (host:port of a server they may write
// to; they use a key prefix of their own and never flush anything) and skip
// with "skipped: REDIS_ADDR not set" without it.
//
// The runner in cmd/report runs them several times, writes RESULTS.md and
// renders the charts:
//
//	cd bench && go run ./cmd/report          # full mode, for the README
//	cd bench && go run ./cmd/report -short   # under two minutes, run by CI
//
// TestMemoryPerKey holds floodgate's figures of MemoryPerKey to bounds
// (CI runs it):
//
//	cd bench && go test -run '^TestMemoryPerKey$' -v .
//
// TestBinarySize holds the binary-size ratio the README states (a
// memstore + TokenBucket program against x/time/rate's) to at most 1.25
// (CI runs it; cmd/binsize prints the figures):
//
//	cd bench && go test -run '^TestBinarySize$' -v .
//
// Components that are missing or do not build are compiled out by build
// tags (nopeer_<name>, nofg_<package>) that the runner sets after probing
// them; their scenarios then skip with a line saying why.
package bench
