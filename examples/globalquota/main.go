// Command globalquota runs simulated gateways that share one global limit
// of 10,000 requests per second, split by package shard over 16 keys so
// that a Redis Cluster spreads it over its masters. Every second it prints
// what the gateways admitted and denied, and how many decisions each
// master made; with -kill-after it shuts one master down mid-run, and the
// seconds after show what that cost: only that master's shards.
//
//	go run ./examples/globalquota              # on an embedded Redis (miniredis)
//	REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 go run ./examples/globalquota
//	REDIS_CLUSTER_ADDRS=... go run ./examples/globalquota -kill-after 3s   # a Cluster you can lose
//
// The demand is 1.5× the limit by default (-demand), spread evenly over
// the gateways (-gateways, 8). A fixed window of one second is the limit,
// so each printed second should admit exactly 10,000 while every master
// is up, and the quota of the dead master's shards less after a kill
// (the Cluster must run with cluster-require-full-coverage no to serve
// the slots it still covers; with replicas, a replica takes over within
// seconds).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/shard"
)

func main() {
	cfg := config{}
	flag.IntVar(&cfg.gateways, "gateways", 8, "simulated gateways, each with its own client, store and limiter")
	flag.Int64Var(&cfg.limit, "limit", 10_000, "the global limit, per second")
	flag.Float64Var(&cfg.demand, "demand", 1.5, "the demand, as a multiple of the limit")
	flag.IntVar(&cfg.shards, "shards", 16, "shards of the limit")
	flag.DurationVar(&cfg.duration, "duration", 6*time.Second, "how long to run")
	flag.DurationVar(&cfg.killAfter, "kill-after", 0, "on a Cluster: shut one master down (SHUTDOWN NOSAVE) after this long; 0: never")
	flag.Parse()
	cfg.cluster = os.Getenv("REDIS_CLUSTER_ADDRS")
	cfg.addr = os.Getenv("REDIS_ADDR")
	if _, err := run(context.Background(), cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	gateways  int
	limit     int64
	demand    float64
	shards    int
	duration  time.Duration
	killAfter time.Duration
	cluster   string // REDIS_CLUSTER_ADDRS
	addr      string // REDIS_ADDR; neither: an embedded miniredis
}

// second is what one second of the run counted.
type second struct {
	admitted, denied, failed atomic.Int64
	mu                       sync.Mutex
	perNode                  map[string]int64 // decisions by node
}

// run runs the gateways, prints each second, and returns what each second
// admitted.
func run(ctx context.Context, cfg config, out io.Writer) ([]int64, error) {
	newClient, where, stop, err := clients(cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	fmt.Fprintf(out, "%d gateways, one limit of %d per second over %d shards, demand %.1fx, on %s\n",
		cfg.gateways, cfg.limit, cfg.shards, cfg.demand, where)

	start := time.Now().Truncate(time.Second).Add(time.Second)
	secs := make([]*second, int(cfg.duration/time.Second)+2)
	for i := range secs {
		secs[i] = &second{perNode: map[string]int64{}}
	}
	at := func(t time.Time) *second {
		i := int(t.Sub(start) / time.Second)
		if i < 0 || i >= len(secs) {
			return nil
		}
		return secs[i]
	}
	obs := &observe.Observer{OnStoreCall: func(_ context.Context, e observe.StoreCall) {
		if s := at(time.Now()); s != nil {
			s.mu.Lock()
			s.perNode[e.Node] += int64(e.Decisions)
			s.mu.Unlock()
		}
	}}
	alg := floodgate.FixedWindow{Limit: cfg.limit, Window: time.Second}
	lims := make([]*floodgate.Limiter, cfg.gateways)
	var clientsMade []redis.UniversalClient
	for i := range lims {
		c := newClient()
		clientsMade = append(clientsMade, c)
		rs, err := redisstore.New(c, &redisstore.Options{Observer: obs, OnFailure: redisstore.FailClosed})
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		// Connect and load the scripts before the first decision: a fresh
		// client's first calls can time out, each perhaps taking a unit.
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = rs.Ping(pctx)
		cancel()
		if err != nil {
			return nil, err
		}
		sh, err := shard.New(rs, &shard.Options{Shards: cfg.shards})
		if err != nil {
			return nil, err
		}
		if lims[i], err = floodgate.New(sh, alg, &floodgate.Options{Name: "global"}); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, c := range clientsMade {
			_ = c.Close()
		}
	}()

	// Each gateway sends its share of the demand every 10 ms, from 16
	// goroutines (so that a slow call does not hold the others back).
	const goroutines, step = 16, 10 * time.Millisecond
	perStep := cfg.demand * float64(cfg.limit) / float64(cfg.gateways) / float64(time.Second/step) / goroutines
	end := start.Add(cfg.duration)
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	for _, lim := range lims {
		for range goroutines {
			wg.Go(func() {
				due := 0.0
				for now := time.Now(); now.Before(end); now = time.Now() {
					due += perStep
					for ; due >= 1; due-- {
						sent := time.Now()
						d, err := lim.Allow(ctx, "partner")
						s := at(time.Now())
						if err == nil && d.Allowed {
							s = at(window(sent, time.Now(), d.ResetAfter))
						}
						switch {
						case s == nil:
						case err != nil:
							s.failed.Add(1)
						case d.Allowed:
							s.admitted.Add(1)
						default:
							s.denied.Add(1)
						}
					}
					time.Sleep(time.Until(now.Add(step)))
				}
			})
		}
	}
	if cfg.killAfter > 0 {
		go func() {
			time.Sleep(cfg.killAfter)
			fmt.Fprintf(out, "killing: %s\n", kill(ctx, clientsMade[0]))
		}()
	}
	wg.Wait()

	fmt.Fprintf(out, "%-7s %9s %9s %7s  decisions by node\n", "second", "admitted", "denied", "failed")
	var admitted []int64
	for i, s := range secs[:int(cfg.duration/time.Second)] {
		admitted = append(admitted, s.admitted.Load())
		nodes := make([]string, 0, len(s.perNode))
		for n := range s.perNode {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		var parts []string
		for _, n := range nodes {
			parts = append(parts, fmt.Sprintf("%s %d", n, s.perNode[n]))
		}
		fmt.Fprintf(out, "%-7d %9d %9d %7d  %s\n", i+1, s.admitted.Load(), s.denied.Load(), s.failed.Load(), strings.Join(parts, ", "))
	}
	return admitted, nil
}

// window returns the start of the one-second window an admission sent at
// sent and answered at answered was counted in. The store decided at some
// instant between the two (on Redis TIME), and an admitted decision's
// ResetAfter is the time from then to its window's end, so the window ends
// near the midpoint plus ResetAfter, within half the call's latency: the
// rounding is right while calls take under a second. Counting an admission
// in the second it returned instead would move one decided just before a
// boundary into the next second, and that second could show more than the
// limit though no window admitted more.
func window(sent, answered time.Time, resetAfter time.Duration) time.Time {
	mid := sent.Add(answered.Sub(sent) / 2)
	return mid.Add(resetAfter).Round(time.Second).Add(-time.Second)
}

// clients returns a function making a client per gateway (default options),
// where they connect, and what stops an embedded server.
func clients(cfg config) (func() redis.UniversalClient, string, func(), error) {
	switch {
	case cfg.cluster != "":
		addrs := strings.Split(cfg.cluster, ",")
		return func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}) },
			"the Redis Cluster at " + cfg.cluster, func() {}, nil
	case cfg.addr != "":
		return func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: cfg.addr}) },
			"the Redis at " + cfg.addr, func() {}, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	return func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: m.Addr()}) },
		"an embedded miniredis at " + m.Addr() + " (one node: set REDIS_CLUSTER_ADDRS for a Cluster)", m.Close, nil
}

// kill shuts down the first master of c's Cluster, and says which.
func kill(ctx context.Context, c redis.UniversalClient) string {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return "not a Cluster: nothing killed"
	}
	var victim string
	var once sync.Once
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		once.Do(func() {
			victim = n.Options().Addr
			_ = n.ShutdownNoSave(ctx).Err() // the connection closes: an error
		})
		return nil
	})
	return "the master at " + victim
}
