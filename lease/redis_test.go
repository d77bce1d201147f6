package lease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
)

// newClient returns a function making Redis clients the test closes: to
// the standalone server at REDIS_ADDR, to the Cluster at
// REDIS_CLUSTER_ADDRS when cluster is set, or else to an embedded
// miniredis of the test's own. It reports whether the server is real.
func newClient(t *testing.T, cluster bool) (func() redis.UniversalClient, bool) {
	t.Helper()
	if cluster {
		addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
		if addrs == "" {
			t.Skip("set REDIS_CLUSTER_ADDRS (comma-separated seed nodes) to run on a Redis Cluster")
		}
		return func() redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, true
	}
	addr, real := os.Getenv("REDIS_ADDR"), true
	if addr == "" {
		addr, real = miniredis.RunT(t).Addr(), false
	}
	return func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, real
}

// testPrefix returns a key prefix unique to this run of the test and
// deletes the keys under it at the end: no test flushes a server it did not
// start.
func testPrefix(t *testing.T, c redis.UniversalClient) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	p := "fgtest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		del := func(ctx context.Context, n *redis.Client) error {
			it := n.Scan(ctx, 0, p+"*", 1000).Iterator()
			for it.Next(ctx) {
				_ = n.Del(ctx, it.Val()).Err()
			}
			return it.Err()
		}
		switch v := c.(type) {
		case *redis.ClusterClient:
			assert.NoError(t, v.ForEachMaster(ctx, del))
		case *redis.Client:
			assert.NoError(t, del(ctx, v))
		}
	})
	return p
}

// redisRemote returns a redisstore over c, closed at the test's end.
// Tests on a shared, loaded machine check correctness, not latency: a
// timed-out call may consume units nobody receives, which the exact
// accounting below would count as an error.
func redisRemote(t *testing.T, c redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(c, &redisstore.Options{Prefix: prefix, Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// gatewayName is the name of the gateways' limiter.
const gatewayName = "gateway"

// gatewayAlgorithms have a quota of 2,000 and no refill within the test:
// windows of 30 days (the test crosses a boundary with odds of about one
// in a million) and a token per 30 minutes.
var gatewayAlgorithms = []floodgate.Algorithm{
	floodgate.FixedWindow{Limit: 2000, Window: 30 * 24 * time.Hour},
	floodgate.SlidingWindow{Limit: 2000, Window: 30 * 24 * time.Hour},
	floodgate.TokenBucket{Rate: 1, Per: 30 * time.Minute, Burst: 2000},
	floodgate.SlidingLog{Limit: 2000, Window: 24 * time.Hour},
}

// TestGateways is the bound on Redis: 8 gateways, each its own Redis
// client, redisstore, lease Store and limiter (of one name), with 32
// goroutines each, share a quota of 2,000 under a demand of 9,216 (half
// the gateways stop early). The units admitted never exceed the quota; after every gateway closes and gives its units back, the remote
// shows exactly the units admitted as consumed; and the units the gateways
// held when demand stopped, the under-admission, is at most 8 × MaxBatch.
func TestGateways(t *testing.T) {
	onServers(t, func(t *testing.T, client func() redis.UniversalClient) {
		for _, alg := range gatewayAlgorithms {
			t.Run(algName(alg), func(t *testing.T) { runGateways(t, client, alg) })
		}
	})
}

// onServers runs f as a subtest on the standalone server and on the
// Cluster (see newClient), with a maker of clients to it.
func onServers(t *testing.T, f func(t *testing.T, client func() redis.UniversalClient)) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			client, real := newClient(t, cluster)
			t.Logf("real Redis: %v", real)
			f(t, client)
		})
	}
}

func runGateways(t *testing.T, client func() redis.UniversalClient, alg floodgate.Algorithm) {
	const (
		gateways   = 8
		goroutines = 32
		attempts   = 64
		maxBatch   = 50
	)
	perGoroutine := attempts
	if testing.Short() {
		perGoroutine /= 4 // still above the quota: 2,304 decisions
	}
	quota := alg.Policy().Quota
	admin := client()
	prefix := testPrefix(t, admin)
	key := "gateway"

	var lims []leased
	for range gateways {
		ls, err := lease.New(redisRemote(t, client(), prefix), &lease.Options{MaxBatch: maxBatch, TTL: time.Minute, Timeout: 10 * time.Second})
		require.NoError(t, err)
		lim, err := floodgate.New(ls, alg, &floodgate.Options{Name: gatewayName})
		if err != nil {
			_ = ls.Close()
		}
		require.NoError(t, err)
		lims = append(lims, leased{Limiter: lim, Store: ls})
	}

	var admitted, maxSeen, errs atomic.Int64
	var wg sync.WaitGroup
	for g, l := range lims {
		// Half the gateways stop early, holding what is left in their
		// pools, while the others run out of quota.
		attempts := []int{perGoroutine / 8, perGoroutine}[g%2]
		for range goroutines {
			wg.Go(func() {
				ctx := context.Background()
				for range attempts {
					d, err := l.Allow(ctx, key)
					if err != nil {
						errs.Add(1)
						continue
					}
					if d.Allowed {
						n := admitted.Add(1)
						for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
						}
					}
				}
			})
		}
	}
	wg.Wait()
	require.Zero(t, errs.Load(), "decisions that failed")
	got := admitted.Load()
	assert.LessOrEqual(t, maxSeen.Load(), quota, "admitted beyond the quota")
	held := int64(0)
	var stats lease.Stats
	for _, l := range lims {
		s := l.Stats()
		stats.Local += s.Local
		stats.Waited += s.Waited
		stats.Forwarded += s.Forwarded
		stats.Leases += s.Leases
	}
	for _, l := range lims {
		require.NoError(t, l.Close())
		held += l.Stats().Returned
	}
	t.Logf("%v: admitted %d of %d; returned on Close %d; decisions local %d, waited %d, forwarded %d; leases %d",
		alg, got, quota, held, stats.Local, stats.Waited, stats.Forwarded, stats.Leases)

	// The remote's own view, through a client of its own: what is left is
	// the quota minus exactly what the gateways admitted.
	fresh, err := floodgate.New(redisRemote(t, client(), prefix), alg, &floodgate.Options{Name: gatewayName})
	require.NoError(t, err)
	res, err := fresh.Apply(context.Background(), key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: quota}, nil)
	require.NoError(t, err)
	assert.Equal(t, quota-got, res.Granted, "units left at the remote after Close")
	// Demand exceeded the quota, so what was not admitted was held in pools
	// when demand stopped: at most MaxBatch per gateway.
	assert.Equal(t, quota, got+held, "admitted + returned")
	assert.LessOrEqual(t, held, int64(gateways*maxBatch), "under-admission")
}

// TestRedisFailOpen leases over a redisstore whose Redis is gone and whose
// failure policy is FailOpen: the pool admits what the store's policy
// granted, and Close gives none of it to the recovered Redis.
func TestRedisFailOpen(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	alg := floodgate.FixedWindow{Limit: 100, Window: 30 * 24 * time.Hour}
	store, err := redisstore.New(c, &redisstore.Options{OnFailure: redisstore.FailOpen, Timeout: time.Second})
	require.NoError(t, err)
	defer func() { _ = store.Close() }()
	// remote is a limiter of the lease's name directly on the redisstore.
	remote, err := floodgate.New(store, alg, &floodgate.Options{Name: testName})
	require.NoError(t, err)
	ls, err := lease.New(store, &lease.Options{MinBatch: 10, MaxBatch: 10})
	require.NoError(t, err)
	lim, err := floodgate.New(ls, alg, &floodgate.Options{Name: testName})
	require.NoError(t, err)
	l := leased{Limiter: lim, Store: ls}

	// 50 units consumed at Redis before it fails: a refund of units
	// granted by FailOpen would give some of them back.
	d, err := remote.AllowN(context.Background(), "k", 50)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	addr := m.Addr()
	m.Close()
	d, err = l.Allow(context.Background(), "k")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "FailOpen admits")
	require.NoError(t, m.StartAddr(addr))
	require.NoError(t, l.Close())

	res, err := remote.Apply(context.Background(), "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 100}, nil)
	require.NoError(t, err)
	assert.EqualValues(t, 50, res.Granted, "nothing was refunded into the recovered Redis")
	assert.EqualValues(t, 0, l.Stats().Returned)
}

// TestFleetRedis: 4 gateways, each its own Redis client, redisstore,
// LeaseFleet and lease Store, share their demand for one key through
// Redis; one is busy, three are light. Each gateway's share follows the
// demands (the busy one's is the largest), the shares add up to about
// FleetBatch, and the lease bound is unchanged: after Close the remote
// shows exactly the units admitted as consumed.
func TestFleetRedis(t *testing.T) { onServers(t, runFleetRedis) }

func runFleetRedis(t *testing.T, client func() redis.UniversalClient) {
	const (
		gateways   = 4
		fleetBatch = 400
		quota      = 1 << 30
	)
	alg := floodgate.FixedWindow{Limit: quota, Window: 30 * 24 * time.Hour}
	prefix := testPrefix(t, client())
	var lims []leased
	for range gateways {
		remote := redisRemote(t, client(), prefix)
		fleet, err := remote.LeaseFleet(2 * time.Second)
		require.NoError(t, err)
		ls, err := lease.New(remote, &lease.Options{Fleet: fleet, FleetBatch: fleetBatch, MaxBatch: fleetBatch,
			FleetInterval: 200 * time.Millisecond, Timeout: 10 * time.Second})
		require.NoError(t, err)
		lim, err := floodgate.New(ls, alg, &floodgate.Options{Name: gatewayName})
		if err != nil {
			_ = ls.Close()
		}
		require.NoError(t, err)
		lims = append(lims, leased{Limiter: lim, Store: ls})
	}
	var admitted, errs atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for g, l := range lims {
		goroutines, pause := 1, 20*time.Millisecond // light: up to 50/s
		if g == 0 {
			goroutines, pause = 8, 0 // busy: as fast as the machine goes
		}
		for range goroutines {
			wg.Go(func() {
				for time.Now().Before(end) {
					d, err := l.Allow(context.Background(), "k")
					switch {
					case err != nil:
						errs.Add(1)
					case d.Allowed:
						admitted.Add(1)
					}
					time.Sleep(pause)
				}
			})
		}
	}
	wg.Wait()
	require.Zero(t, errs.Load(), "decisions that failed")
	shares := make([]int64, gateways)
	sum := int64(0)
	for g, l := range lims {
		shares[g] = l.Share("k")
		sum += shares[g]
		s := l.Stats()
		assert.Zero(t, s.ShareErrors, "gateway %d", g)
		assert.GreaterOrEqual(t, s.Shares, int64(2), "gateway %d shared its demand", g)
	}
	t.Logf("admitted %d; shares %v (sum %d of FleetBatch %d)", admitted.Load(), shares, sum, fleetBatch)
	for g := 1; g < gateways; g++ {
		assert.Greater(t, shares[0], shares[g], "the busy gateway's share against gateway %d's", g)
	}
	// Shares computed from the same demands add up to FleetBatch at most
	// (each rounded down, at least MinBatch); the gateways measure at
	// different instants, hence the slack.
	assert.LessOrEqual(t, sum, int64(fleetBatch*5/4+gateways))
	for _, l := range lims {
		require.NoError(t, l.Close())
	}
	fresh, err := floodgate.New(redisRemote(t, client(), prefix), alg, &floodgate.Options{Name: gatewayName})
	require.NoError(t, err)
	res, err := fresh.Apply(context.Background(), "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: quota}, nil)
	require.NoError(t, err)
	assert.Equal(t, quota-admitted.Load(), res.Granted, "units left at the remote after Close")
}
