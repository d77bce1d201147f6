package redisstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// gateways returns n stores, each on its own client (separate connection
// pools, like n gateway processes), sharing one prefix.
func gateways(t *testing.T, n int, newClient func() redis.UniversalClient, opts Options) []*Store {
	t.Helper()
	stores := make([]*Store, n)
	for i := range stores {
		c := newClient()
		t.Cleanup(func() { _ = c.Close() })
		if opts.Prefix == "" {
			opts.Prefix = testPrefix(t, c)
		}
		stores[i] = newStore(t, c, &opts)
	}
	return stores
}

// hammer runs goroutines per store, each making attempts decisions on the
// keys (together they visit the keys in turn, each about the same number of
// times), alternating a take of one unit and a take of up to two, and
// returns the units granted per key.
func hammer(t *testing.T, stores []*Store, keys []string, alg floodgate.Algorithm, goroutines, attempts int) map[string]int64 {
	t.Helper()
	granted := make([]atomic.Int64, len(keys))
	var (
		wg   sync.WaitGroup
		errs atomic.Int64
		msg  atomic.Value
	)
	for si, s := range stores {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range attempts {
					k := ((si*goroutines+g)*attempts + i) % len(keys)
					req := floodgate.Request{Op: floodgate.OpTake, N: 1}
					if i%2 == 1 {
						req = floodgate.Request{Op: floodgate.OpTakeUpTo, N: 2}
					}
					res, err := applyOnce(context.Background(), s, keys[k], alg, req)
					if err != nil {
						errs.Add(1)
						msg.Store(err.Error())
						continue
					}
					granted[k].Add(res.Granted)
				}
			}()
		}
	}
	wg.Wait()
	require.Zero(t, errs.Load(), "errors, the last: %v", msg.Load())
	out := make(map[string]int64, len(keys))
	for i, k := range keys {
		out[k] = granted[i].Load()
	}
	return out
}

// sameWindow runs f and reports whether the server's clock stayed in one
// window of length w, so that a window algorithm's quota did not renew.
func sameWindow(t *testing.T, c redis.UniversalClient, w time.Duration, f func()) bool {
	t.Helper()
	before, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	f()
	after, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	return before.UnixNano()/int64(w) == after.UnixNano()/int64(w)
}

// TestDistributedExactness is the distributed contract: 8 independent
// clients (8 gateways) × 64 goroutines hammer one key on the server's
// clock; the token bucket, the fixed window and the sliding log admit
// exactly their quota, the sliding counter at most its quota (with an
// empty previous window, exactly), the leaky bucket exactly one request
// that departs at once.
func TestDistributedExactness(t *testing.T) {
	parallelOnMiniredis(t)
	if testing.Short() {
		t.Skip("-short")
	}
	loadTest(t)
	const (
		clients  = 8
		attempts = 6
	)
	goroutines, quota := 64, int64(1000)
	srv := newServer(t)
	if !srv.real() {
		// miniredis runs scripts in an interpreter written in Go: keep
		// its share of the test time small; the real server takes it all.
		goroutines, quota = 8, 200
	}
	for _, batch := range []int{1, 32} {
		for _, alg := range []floodgate.Algorithm{
			floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: quota},
			floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: quota},
			floodgate.FixedWindow{Limit: quota, Window: 50 * 24 * time.Hour},
			floodgate.SlidingWindow{Limit: quota, Window: 50 * 24 * time.Hour},
			floodgate.SlidingLog{Limit: quota, Window: 24 * time.Hour},
		} {
			t.Run(fmt.Sprintf("%v/batch=%d", alg, batch), func(t *testing.T) {
				stores := gateways(t, clients, func() redis.UniversalClient {
					return redis.NewClient(&redis.Options{Addr: srv.addr, ContextTimeoutEnabled: true, PoolSize: goroutines})
				}, Options{BatchSize: batch})
				var got map[string]int64
				ok := sameWindow(t, srv.client(t), 50*24*time.Hour, func() {
					got = hammer(t, stores, []string{"hot"}, alg, goroutines, attempts)
				})
				if !ok {
					t.Skip("the server's clock crossed a window boundary; the quota renewed")
				}
				want := quota
				if kindOf(alg) == step.KindLeakyBucket {
					// A shaper without delay admits one request, then a
					// queue is waiting: the others would need a delay.
					want = 1
				}
				require.Equal(t, want, got["hot"], "admitted")
			})
		}
	}
}

// clusterAddrs returns REDIS_CLUSTER_ADDRS, or skips.
func clusterAddrs(t *testing.T) []string {
	t.Helper()
	v := os.Getenv("REDIS_CLUSTER_ADDRS")
	if v == "" {
		t.Skip("set REDIS_CLUSTER_ADDRS (comma-separated seed nodes of a Redis Cluster) to run the cluster tests")
	}
	return strings.Split(v, ",")
}

// TestClusterExactness runs the distributed contract on a real Redis
// Cluster over 1,000 keys spread across slots and masters: every key admits
// exactly its quota, through ClusterClients that route each script by the
// key's hash tag (a CROSSSLOT error would show up as an error here).
func TestClusterExactness(t *testing.T) {
	addrs := clusterAddrs(t)
	const (
		clients    = 8
		goroutines = 64
		keys       = 1000
		quota      = 3
	)
	newClient := func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, PoolSize: goroutines})
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("user:%d", i)
	}
	probe := newClient()
	t.Cleanup(func() { _ = probe.Close() })
	for _, batch := range []int{1, 32} {
		for _, alg := range []floodgate.Algorithm{
			floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: quota},
			floodgate.FixedWindow{Limit: quota, Window: 50 * 24 * time.Hour},
			floodgate.SlidingWindow{Limit: quota, Window: 50 * 24 * time.Hour},
			floodgate.SlidingLog{Limit: quota, Window: 24 * time.Hour},
		} {
			t.Run(fmt.Sprintf("%v/batch=%d", alg, batch), func(t *testing.T) {
				stores := gateways(t, clients, newClient, Options{BatchSize: batch, Prefix: testPrefix(t, probe)})
				var got map[string]int64
				ok := sameWindow(t, probe, 50*24*time.Hour, func() {
					got = hammer(t, stores, names, alg, goroutines, 2*keys*quota/(clients*goroutines)+2)
				})
				if !ok {
					t.Skip("the server's clock crossed a window boundary; the quota renewed")
				}
				for _, k := range names {
					require.Equal(t, int64(quota), got[k], "admitted for %s", k)
				}
				// The keys landed on every master.
				masters := map[string]bool{}
				cc := probe.(*redis.ClusterClient)
				for _, k := range names[:50] {
					slot, err := cc.ClusterKeySlot(context.Background(), stores[0].Key(testName, k, kindOf(alg))).Result()
					require.NoError(t, err)
					masters[fmt.Sprint(slot*3/16384)] = true
				}
				assert.Len(t, masters, 3, "keys spread over the slot ranges")
			})
		}
	}
	// One hot key: batched, its decisions share calls of the batch script
	// on the key's node.
	t.Run("hot key/batch=32", func(t *testing.T) {
		const quota = 1000
		alg := floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: quota}
		stores := gateways(t, clients, newClient, Options{BatchSize: 32, Prefix: testPrefix(t, probe)})
		got := hammer(t, stores, []string{"hot"}, alg, goroutines, 6)
		require.Equal(t, int64(quota), got["hot"], "admitted")
	})
}

// limitsPairs are the composites of the Limits exactness tests and the
// units each admits in a burst: a token bucket of 100 refilled one unit an
// hour and a fixed window of 60 a minute, where the window is the smaller;
// and the same window with a bucket of 40, the smaller.
var limitsPairs = []struct {
	ls   floodgate.Limits
	want int64
}{
	{floodgate.Limits{floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 100}, floodgate.FixedWindow{Limit: 60, Window: time.Minute}}, 60},
	{floodgate.Limits{floodgate.FixedWindow{Limit: 60, Window: time.Minute}, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 40}}, 40},
}

// hammerLimits runs hammer on one key of the stores newStores returns for
// ls and checks that exactly want units were admitted. A burst that crossed
// into another minute of the server's clock, where a window's quota
// renewed, is run again on new stores (it then starts early in a minute);
// a second crossing skips.
func hammerLimits(t *testing.T, newStores func() []*Store, probe redis.UniversalClient, ls floodgate.Limits, want int64, goroutines int) {
	t.Helper()
	for range 2 {
		stores := newStores()
		var got map[string]int64
		if sameWindow(t, probe, time.Minute, func() { got = hammer(t, stores, []string{"hot"}, ls, goroutines, 6) }) {
			require.Equal(t, want, got["hot"], "admitted by %v", ls)
			return
		}
	}
	t.Skip("the server's clock crossed a minute twice; the window's quota renewed")
}

// TestDistributedLimitsExactness is the distributed contract for a Limits:
// 8 independent clients (built with go-redis' default options) × 64
// goroutines hammer one key on the server's clock; exactly the smaller
// limit's quota is admitted, whichever limit it is.
func TestDistributedLimitsExactness(t *testing.T) {
	parallelOnMiniredis(t)
	if testing.Short() {
		t.Skip("-short")
	}
	loadTest(t)
	const clients = 8
	goroutines := 64
	srv := newServer(t)
	if !srv.real() {
		goroutines = 8 // see TestDistributedExactness
	}
	for _, batch := range []int{1, 32} {
		for _, p := range limitsPairs {
			t.Run(fmt.Sprintf("%v/batch=%d", p.ls, batch), func(t *testing.T) {
				newStores := func() []*Store {
					return gateways(t, clients, func() redis.UniversalClient {
						return redis.NewClient(&redis.Options{Addr: srv.addr})
					}, Options{BatchSize: batch})
				}
				hammerLimits(t, newStores, srv.client(t), p.ls, p.want, goroutines)
			})
		}
	}
}

// TestClusterLimitsExactness is TestDistributedLimitsExactness on the Redis
// Cluster at REDIS_CLUSTER_ADDRS: the limits' keys share the user key's
// hash slot, so one script decides them on its master.
func TestClusterLimitsExactness(t *testing.T) {
	addrs := clusterAddrs(t)
	const (
		clients    = 8
		goroutines = 64
	)
	newClient := func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}) }
	probe := newClient()
	t.Cleanup(func() { _ = probe.Close() })
	for _, batch := range []int{1, 32} {
		for _, p := range limitsPairs {
			t.Run(fmt.Sprintf("%v/batch=%d", p.ls, batch), func(t *testing.T) {
				var stores []*Store
				newStores := func() []*Store {
					stores = gateways(t, clients, newClient, Options{BatchSize: batch, Prefix: testPrefix(t, probe)})
					return stores
				}
				hammerLimits(t, newStores, probe, p.ls, p.want, goroutines)
				// Every limit's key is on the hot key's slot.
				cc := probe.(*redis.ClusterClient)
				keys := limitKeys(stores[0], "hot", p.ls)
				for _, k := range keys {
					slot, err := cc.ClusterKeySlot(context.Background(), k).Result()
					require.NoError(t, err)
					require.Equal(t, int64(slotOf(keys[0])), slot, "%s", k)
					n, err := cc.Exists(context.Background(), k).Result()
					require.NoError(t, err)
					require.Equal(t, int64(1), n, "%s holds the limit's state", k)
				}
			})
		}
	}
}
