package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// quota is the limit every library in a scenario is configured with: Limit
// units per Period, with a burst (or window count) of Limit.
type quota struct {
	Limit  int64
	Period time.Duration
}

var (
	// admitAll is a billion units per hour with a burst of a billion: no run
	// makes a billion calls on one key, so every call is admitted without
	// any refill, and the benchmarks measure the admitting path. (A billion
	// per second would do the same for most libraries, but sethvargo's
	// memorystore refills delta·Interval/Tokens tokens per tick, one token
	// per second at that rate, and would deny after the first second.)
	admitAll = quota{Limit: 1_000_000_000, Period: time.Hour}
	// trackedQuota refills 10 units per second with a burst of a million,
	// as memstore's own benchmark does: every call of the 100,000-key
	// scenarios is admitted, and no key's quota is ever fully restored
	// during a run, so no store may drop the state of a key it tracks: the
	// scenario measures decisions on tracked keys. reclaimedQuota is the
	// regime in which keys are restored between their calls.
	trackedQuota = quota{Limit: 1_000_000, Period: 100_000 * time.Second}
	// reclaimedQuota is the opposite regime: 100 units per 100 µs with a
	// burst (or window count) of 100, so every call is admitted and a key's
	// one-unit spend is refilled 1 µs later (its window, for the window
	// algorithms, ends within 200 µs), long before the same key comes
	// round again in the 100,000-key walk (tens of thousands of calls, a
	// millisecond or more, later). Each key is fully restored between its
	// calls, so a store that forgets restored keys to bound its memory may
	// forget them and meet them again. memstore's sweeps keep a restored
	// entry for memstore.ReclaimGrace (1 s) and so find these keys (0
	// allocations a call); before the grace they reclaimed and inserted
	// them again, 2 allocations and 94 B a call.
	reclaimedQuota = quota{Limit: 100, Period: 100 * time.Microsecond}
	// denyAll is one unit per hour: the warm-up call spends it and every
	// timed call is denied, so the benchmarks measure the denying path.
	denyAll = quota{Limit: 1, Period: time.Hour}
	// memQuota is the quota of the memory scenarios: 100 per hour, so that
	// the unit each key spends takes 36 s to refill: no entry is fully
	// restored (and reclaimable, or expired in Redis) while the keys are
	// inserted and measured.
	memQuota = quota{Limit: 100, Period: time.Hour}
	// accuracyQuota is the quota of the accuracy scenario: nothing refills
	// during a trial.
	accuracyQuota = quota{Limit: 100, Period: time.Hour}
)

// inProc is an in-process keyed limiter library.
type inProc struct {
	name string
	// skip, when set, is why the library is not in this build (the runner
	// compiles out components that are missing or do not build).
	skip string
	// noDeny, when set, is why the library cannot run the denied regime.
	noDeny string
	// open returns a keyed limiter enforcing q and a function releasing it.
	open func(q quota) (allow func(key string) bool, close func(), err error)
}

// remoteLib is a keyed limiter library backed by Redis.
type remoteLib struct {
	name string
	skip string
	// open returns a keyed limiter enforcing q through c. Several limiters
	// opened on one server share their state when given the same keys.
	open func(c redis.UniversalClient, q quota) (allow func(ctx context.Context, key string) (bool, error), close func(), err error)
}

// notBuilt is the skip line of a component the runner compiled out.
func notBuilt(component string) string {
	return "skipped: " + component + " not built (package not present or does not build; see bench/RESULTS.md)"
}

// Only the stub files, built with a no* tag, call notBuilt.
var _ = notBuilt

// makeKeys returns n distinct keys prefix+"<i>".
func makeKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// keys100k are the keys of the 100,000-key scenarios, shared so that every
// library sees the same strings.
var keys100k = sync.OnceValue(func() []string { return makeKeys("user:", 100_000) })

// spread returns a goroutine's starting index into a key set, so that
// parallel goroutines walk different keys.
func spread(seq *atomic.Uint64) uint64 {
	return seq.Add(7919) * 7919
}

// runID makes the keys of this process unique on a shared Redis.
var runID = sync.OnceValue(func() string {
	// Short, so that it weighs little in the per-key memory of Redis.
	return "fgb" + strconv.FormatInt(int64(os.Getpid()), 36) + strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
})

// redisAddr returns REDIS_ADDR or skips the benchmark with the line the
// runner looks for.
func redisAddr(b *testing.B) string {
	b.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("skipped: REDIS_ADDR not set")
	}
	return addr
}

// newClient returns a client of the server at addr, configured alike for
// every library: a pool of 64 connections so that 64 goroutines never wait
// for one, and context deadlines honoured (no library here sets one on the
// hot path; floodgate's store then needs no goroutine per call to enforce
// its timeout).
func newClient(b *testing.B, addr string) *redis.Client {
	b.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              64,
		ContextTimeoutEnabled: true,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		b.Skipf("skipped: Redis at REDIS_ADDR=%s does not answer: %v", addr, err)
	}
	return c
}

// redisPattern returns the pattern matching every key this process wrote for
// the named scenario, under any library's prefix.
func redisPattern(scenario string) string {
	return "*" + runID() + ":" + scenario + ":*"
}

// userKey is the limiter key of library lib in scenario, item i.
func userKey(scenario, lib string, i int) string {
	return runID() + ":" + scenario + ":" + lib + ":" + strconv.Itoa(i)
}

// scanKeys returns the keys matching pattern.
func scanKeys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// deleteKeys removes the keys of this process in scenario. It never
// flushes: the server may be shared.
func deleteKeys(c redis.UniversalClient, scenario string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, err := scanKeys(ctx, c, redisPattern(scenario))
	if err != nil {
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		c.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
}

// checkRegime fails b when more than one call in a thousand had the outcome
// the scenario's quota rules out: the libraries would not be compared on
// the same path.
func checkRegime(b *testing.B, calls, unexpected int64, want string) {
	b.Helper()
	if calls > 0 && unexpected*1000 > calls {
		b.Fatalf("%d of %d calls were not %s: the quota does not hold this library in the scenario's regime", unexpected, calls, want)
	}
}

// gomaxprocs is the number of goroutines RunParallel starts per unit of
// parallelism.
func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
