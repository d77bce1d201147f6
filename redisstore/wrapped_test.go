package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/step"
)

// wrappedMaxBatch is the MaxBatch of the lease stores under the harness:
// small, so that the pools of a fleet hold a fraction of the quotas the
// cases use.
const wrappedMaxBatch = 4

// TestConformanceWrapped runs floodgatetest's conservative tier on the
// composition the docs show, observe.Store(lease.New(redisstore)): three
// processes of a fleet, each with its own client, Redis store, lease pools
// and Tally, over one server and one prefix (on the Cluster too when
// REDIS_CLUSTER_ADDRS is set). The fixed and sliding windows admit no
// more than the reference and under-admit at most the units the pools
// hold; the token bucket and sliding log are outside a lease's tier and
// the leaky bucket and Limits are refused at Bind (see lease's doc). A
// load test on miniredis (loadTest), where lease's own TestConformance
// covers the tier over memstore.
func TestConformanceWrapped(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		loadTest(t)
		parallelOnMiniredis(t)
		runWrapped(t, newServer, func(t *testing.T, srv *server) redis.UniversalClient {
			return srv.client(t)
		})
	})
	t.Run("Cluster", func(t *testing.T) {
		addrs := clusterAddrs(t)
		runWrapped(t, func(testing.TB) *server {
			return &server{addr: strings.Join(addrs, ",")} // a real server: the clock is only the harness's
		}, func(t *testing.T, _ *server) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
}

// runWrapped runs the harness on observed lease stores over Redis stores:
// each case (or fleet) on a server newServer returns, each process with a
// client of its own from newClient.
func runWrapped(t *testing.T, newServer func(testing.TB) *server, newClient func(*testing.T, *server) redis.UniversalClient) {
	wrap := func(t *testing.T, c redis.UniversalClient, srv *server, prefix string, now func() time.Time) floodgate.Store {
		t.Helper()
		o := conformanceOptions(srv, now, 0)
		o.Prefix = prefix
		o.Timeout = 10 * time.Second
		ls, err := lease.New(newStore(t, c, o), &lease.Options{MaxBatch: wrappedMaxBatch, Now: now, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ls.Close(); err != nil {
				t.Error(err)
			}
		})
		var tally observe.Tally
		s, err := observe.Store(ls, &observe.Observer{Tally: &tally})
		if err != nil {
			t.Fatal(err)
		}
		return unclosed{s}
	}
	fleet := func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
		srv := newServer(t)
		prefix := testPrefix(t, newClient(t, srv))
		ss := make([]floodgate.Store, n)
		for i := range ss {
			ss[i] = wrap(t, newClient(t, srv), srv, prefix, now)
		}
		return ss
	}
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return fleet(t, now, 1)[0]
	}, &floodgatetest.Options{
		Conservative:   true,
		Fleet:          fleet,
		UnderAdmission: func(_ floodgate.Algorithm, n int) int64 { return int64(n) * wrappedMaxBatch },
		Skip: func(alg floodgate.Algorithm) string {
			switch k, _ := step.KindOf(alg); k {
			case step.KindTokenBucket, step.KindSlidingLog:
				return "outside a lease's conservative tier (see lease's package doc)"
			}
			return ""
		},
	})
}

// unclosed hides a Store's Close from floodgatetest.Run, whose Close case
// binds all five algorithms and so fails on a lease, which refuses the
// leaky bucket at Bind; the stores are closed at the end of each case.
type unclosed struct{ floodgate.Store }
