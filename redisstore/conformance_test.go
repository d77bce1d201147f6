package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// nowFunc adapts a clock function to server.clock.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

// conformanceOptions returns the options of a store under the harness: its
// clock, or Redis TIME for a nil now, and batching when batch > 1 (1: unbatched).
func conformanceOptions(srv *server, now func() time.Time, batch int) *Options {
	o := &Options{BatchSize: batch}
	if now != nil {
		o.Now = srv.clock(nowFunc(now))
		// A minute of margin: on a real Redis, TTLs run on the wall clock
		// while the harness's clock stands still or jumps.
		o.ExpiryMargin = time.Minute
	}
	return o
}

// TestConformance runs the store harness on redisstore: on the Redis at
// REDIS_ADDR, else on a miniredis per store whose clock (TIME and TTLs)
// follows the harness's virtual clock; with a nil clock, on Redis TIME,
// where the scripts' fast paths run.
func TestConformance(t *testing.T) {
	parallelOnMiniredis(t)
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		return newStore(t, srv.client(t), conformanceOptions(srv, now, 0))
	}, nil)
}

// TestConformanceUnbatched runs the harness with batching off (TestConformance
// runs the default, batched). On miniredis it is a load test (the whole
// harness again, through one interpreter).
func TestConformanceUnbatched(t *testing.T) {
	loadTest(t)
	parallelOnMiniredis(t)
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		return newStore(t, srv.client(t), conformanceOptions(srv, now, 1))
	}, nil)
}

// TestConformanceCluster runs the harness on the Redis Cluster at
// REDIS_CLUSTER_ADDRS, unbatched and batched, each store under a prefix of
// its own.
func TestConformanceCluster(t *testing.T) {
	addrs := clusterAddrs(t)
	for _, batch := range []int{1, 16} {
		t.Run(map[int]string{0: "Unbatched", 16: "Batched"}[batch], func(t *testing.T) {
			floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				srv := &server{addr: strings.Join(addrs, ",")} // a real server: the clock is only the harness's
				return newStore(t, c, conformanceOptions(srv, now, batch))
			}, nil)
		})
	}
}

// TestConformanceFleet runs the conservative cases on redisstore through
// three stores of independent clients sharing one server and one prefix,
// batched and not: the processes of a fleet. An exact store admits no
// more than the reference and, on a frozen clock, denies no earlier. A
// load test: TestConformance covers the exact tier on miniredis.
func TestConformanceFleet(t *testing.T) {
	loadTest(t)
	parallelOnMiniredis(t)
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		return newStore(t, srv.client(t), conformanceOptions(srv, now, 0))
	}, &floodgatetest.Options{
		Conservative: true,
		Fleet: func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
			srv := newServer(t)
			prefix := testPrefix(t, srv.client(t))
			ss := make([]floodgate.Store, n)
			for i := range ss {
				o := conformanceOptions(srv, now, 1+i%2*15) // unbatched and batched
				o.Prefix = prefix
				ss[i] = newStore(t, srv.client(t), o)
			}
			return ss
		},
	})
}
