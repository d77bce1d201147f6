// Command regions runs three regions that share one global quota, each
// deciding on its own Redis, with package region moving the quota to
// where the demand is. Every second it prints each region's demand, what
// it admitted, and what it holds of the current window at the
// coordinator; traffic shifts from one region to another mid-run, and
// with -cut-after one region loses its link to the coordinator.
//
//	go run ./examples/regions                    # four embedded Redis servers (miniredis)
//	go run ./examples/regions -cut-after 0       # no cut
//	go run ./examples/regions -redis 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 -coord 127.0.0.1:7004
//
// The quota is 2,000 units per 2s window (-quota, -window), reconciled
// every 100ms (-interval); the run starts on a window boundary and lasts
// 8s (-duration). Demand is 1.2× the quota: 60/30/10 across eu-west,
// us-east and ap-south, turning to 10/30/60 after 3s (-shift-after).
// After 5s (-cut-after), eu-west loses its link to the coordinator: it
// keeps what it holds of that window, then admits its floor (5%), and the
// others take the rest from the next window on. Each window's admissions
// add up to at most the quota, and close to it.
//
// Each region runs 3 pods (-pods): each pod has its own region.Store on
// the region's Redis, and the pods of a region share one reconciler
// through rediscoord.NewPeers on that Redis (region.Options.Peers), so
// one pod per region calls the coordinator, with the whole region's
// demand. With -pods 1 each region is one process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/region"
	"github.com/floodgate-go/floodgate/region/rediscoord"
)

func main() {
	cfg := config{}
	flag.Int64Var(&cfg.quota, "quota", 2000, "the global quota per window")
	flag.DurationVar(&cfg.window, "window", 2*time.Second, "the window")
	flag.DurationVar(&cfg.interval, "interval", 100*time.Millisecond, "the reconcilers' interval")
	flag.DurationVar(&cfg.duration, "duration", 8*time.Second, "how long to run, from the first window boundary")
	flag.DurationVar(&cfg.shiftAfter, "shift-after", 3*time.Second, "when demand shifts from eu-west to ap-south")
	flag.DurationVar(&cfg.cutAfter, "cut-after", 5*time.Second, "cut eu-west off from the coordinator after this long; 0: never")
	flag.StringVar(&cfg.redis, "redis", "", "three Redis addresses, comma-separated, one per region (default: embedded miniredis)")
	flag.StringVar(&cfg.coord, "coord", "", "the coordinator's Redis address (default: embedded miniredis)")
	flag.IntVar(&cfg.pods, "pods", 3, "processes (pods) per region, sharing its reconciler")
	flag.Parse()
	if err := run(context.Background(), cfg, log.Writer()); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	quota                      int64
	window, interval, duration time.Duration
	shiftAfter, cutAfter       time.Duration
	redis, coord               string
	pods                       int
}

var regions = []region.Region{
	{Name: "eu-west", Floor: 0.05},
	{Name: "us-east", Floor: 0.05},
	{Name: "ap-south", Floor: 0.05},
}

// cuttable is a Coordinator whose link can be cut.
type cuttable struct {
	region.Coordinator
	cut atomic.Bool
}

var errCut = errors.New("link cut")

func (c *cuttable) Exchange(ctx context.Context, m *region.Message) (*region.Reply, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.Coordinator.Exchange(ctx, m)
}

// run runs the regions for cfg.duration and writes a line per second to w.
func run(ctx context.Context, cfg config, w io.Writer) error {
	addrs := make([]string, 4)
	if cfg.redis != "" {
		copy(addrs, strings.Split(cfg.redis, ","))
	}
	addrs[3] = cfg.coord
	for i, a := range addrs {
		if a == "" {
			mr, err := miniredis.Run()
			if err != nil {
				return err
			}
			defer mr.Close()
			addrs[i] = mr.Addr()
		}
	}
	prefix := fmt.Sprintf("example-regions-%d:", time.Now().UnixNano())
	clients := make([]*redis.Client, 4)
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, PoolSize: 32})
		defer clients[i].Close()
	}
	coord, err := rediscoord.New(clients[3], regions, &rediscoord.Options{Prefix: prefix + "{coord}:"})
	if err != nil {
		return err
	}
	alg := floodgate.FixedWindow{Limit: cfg.quota, Window: cfg.window}
	pods := max(cfg.pods, 1)
	links := make([]*cuttable, 3)
	stores := make([][]*region.Store, 3)
	limiters := make([][]*floodgate.Limiter, 3)
	for i, r := range regions {
		links[i] = &cuttable{Coordinator: coord} // cutting a region cuts all its pods
		opts := region.Options{Interval: cfg.interval, Margin: 50 * time.Millisecond}
		if pods > 1 {
			// The region's pods elect one reconciler through its Redis.
			peers, err := rediscoord.NewPeers(clients[i], r.Name, &rediscoord.PeersOptions{Prefix: prefix + "{" + r.Name + "}:"})
			if err != nil {
				return err
			}
			opts.Peers = peers
		}
		for range pods {
			// In a real deployment each pod is a process with its own
			// client; here the pods of a region share one.
			local, err := redisstore.New(clients[i], &redisstore.Options{Prefix: prefix + r.Name + ":", Timeout: 200 * time.Millisecond})
			if err != nil {
				return err
			}
			s, err := region.New(local, links[i], regions, r.Name, &opts)
			if err != nil {
				return err
			}
			defer s.Close()
			l, err := floodgate.New(s, alg, &floodgate.Options{Name: "api"})
			if err != nil {
				return err
			}
			stores[i], limiters[i] = append(stores[i], s), append(limiters[i], l)
		}
	}

	// Start on a window boundary, so that the printed windows are whole.
	start := time.Unix(0, (region.WindowIndex(time.Now(), cfg.window)+1)*int64(cfg.window))
	time.Sleep(time.Until(start))
	rate := func(r int, at time.Duration) float64 {
		shares := []float64{0.6, 0.3, 0.1}
		if at >= cfg.shiftAfter {
			shares = []float64{0.1, 0.3, 0.6}
		}
		return shares[r] * 1.2 * float64(cfg.quota) / cfg.window.Seconds()
	}
	var asked, admitted [3]atomic.Int64
	var mu sync.Mutex
	perWindow := map[int64]int64{} // admissions by window, of the local stores' clock
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range regions {
		work := make(chan struct{}, 4096)
		wg.Add(1)
		go func() { // the pacer: requests at the region's rate
			defer wg.Done()
			defer close(work)
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			last, due := time.Now(), 0.0
			for {
				select {
				case <-stop:
					return
				case now := <-tick.C:
					due += rate(r, now.Sub(start)) * now.Sub(last).Seconds()
					last = now
					for ; due >= 1; due-- {
						select {
						case work <- struct{}{}:
						default:
						}
					}
				}
			}
		}()
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					n := asked[r].Add(1) // and the request goes to the region's pods in turn
					res, err := limiters[r][n%int64(pods)].Apply(ctx, "tenant", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
					if err != nil || !res.Allowed {
						continue
					}
					admitted[r].Add(1)
					mu.Lock()
					perWindow[region.WindowIndex(res.At, cfg.window)]++
					mu.Unlock()
				}
			}()
		}
	}

	fmt.Fprintf(w, "quota %d per %v over %d regions of %d pods; demand 1.2× the quota, 60/30/10, then 10/30/60 after %v\n",
		cfg.quota, cfg.window, len(regions), pods, cfg.shiftAfter)
	fmt.Fprintf(w, "%5s  %-24s  %-24s  %s\n", "t", "asked/s", "admitted/s", "holds of the window")
	fmt.Fprintf(w, "%5s  %-24s  %-24s  %-21s\n", "", "eu-west us-east ap-south", "eu-west us-east ap-south", "eu-west us-east ap-s.")
	id := region.QuotaID("api", "tenant")
	var last [3]int64
	var lastAsked [3]int64
	cutDone := false
	for sec := 1; time.Duration(sec)*time.Second <= cfg.duration; sec++ {
		time.Sleep(time.Until(start.Add(time.Duration(sec) * time.Second)))
		if cfg.cutAfter > 0 && !cutDone && time.Since(start) >= cfg.cutAfter {
			links[0].cut.Store(true)
			cutDone = true
			fmt.Fprintf(w, "       eu-west is cut off from the coordinator\n")
		}
		now := time.Now()
		var a, d [3]int64
		for r := range regions {
			n, m := admitted[r].Load(), asked[r].Load()
			a[r], d[r] = n-last[r], m-lastAsked[r]
			last[r], lastAsked[r] = n, m
		}
		var held [3]int64
		rep, err := coord.Exchange(ctx, &region.Message{Region: regions[0].Name, At: now,
			Quotas: []region.QuotaMessage{{ID: id, Limit: cfg.quota, Window: cfg.window}}})
		if err == nil {
			ws := rep.Quotas[0].Windows[0]
			for r := range held {
				held[r] = ws.Granted[r] - ws.Debited[r]
			}
		}
		fmt.Fprintf(w, "%4ds  %7d %7d %8d  %7d %7d %8d  %7d %6d %6d\n",
			sec, d[0], d[1], d[2], a[0], a[1], a[2], held[0], held[1], held[2])
		// At a window's end (a second after it, for the last decisions),
		// its total.
		if ended := start.Add(time.Duration(sec)*time.Second - time.Second); ended.After(start) &&
			ended.Sub(start)%cfg.window == 0 {
			i := region.WindowIndex(ended, cfg.window) - 1
			mu.Lock()
			fmt.Fprintf(w, "       window %d admitted %d of %d\n", i-region.WindowIndex(start, cfg.window), perWindow[i], cfg.quota)
			mu.Unlock()
		}
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(w, "admitted per window:")
	first := region.WindowIndex(start, cfg.window)
	over := false
	for i := first; i < region.WindowIndex(time.Now(), cfg.window); i++ {
		fmt.Fprintf(w, " %d", perWindow[i])
		over = over || perWindow[i] > cfg.quota
	}
	fmt.Fprintf(w, " (quota %d)\n", cfg.quota)
	for i, ss := range stores {
		var st region.Stats
		callers := 0
		for _, s := range ss {
			p := s.Stats()
			st.Intervals, st.Calls, st.FailedCalls = st.Intervals+p.Intervals, st.Calls+p.Calls, st.FailedCalls+p.FailedCalls
			st.MaxCallsPerInterval = max(st.MaxCallsPerInterval, p.MaxCallsPerInterval)
			st.DebitedUnits, st.StrandedUnits = st.DebitedUnits+p.DebitedUnits, st.StrandedUnits+p.StrandedUnits
			if p.Calls > 0 {
				callers++
			}
		}
		fmt.Fprintf(w, "%s: %d intervals, %d calls to the coordinator (at most %d in one) from %d of %d pods, %d failed, %d units debited, %d stranded\n",
			regions[i].Name, st.Intervals, st.Calls, st.MaxCallsPerInterval, callers, pods, st.FailedCalls, st.DebitedUnits, st.StrandedUnits)
	}
	if over {
		return errors.New("a window admitted more than the quota")
	}
	return nil
}
