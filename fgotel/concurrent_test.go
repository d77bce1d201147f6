package fgotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// TestConcurrentDecisions decides from 8 goroutines at once, 5,000 times
// each, on two observed memstore limiters, a single algorithm and a
// composite, on keys they share, while another goroutine collects: every
// series only grows from one collection to the next, and once the
// deciders are done the counts by result are what the callers were told.
func TestConcurrentDecisions(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	api := observed(t, "api", floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 20}, nil, o)
	plan := observed(t, "plan", floodgate.Limits{
		floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 20},
		floodgate.SlidingWindow{Limit: 300, Window: time.Minute},
	}, nil, o)
	const goroutines, decisions = 8, 5000
	var told [2][4]atomic.Int64 // [api, plan][outcome]
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for i := range decisions {
				l, which := api, 0
				if i%2 == 1 {
					l, which = plan, 1
				}
				n := int64(1 + i%3)
				key := fmt.Sprintf("k%d", (g+i)%4)
				if i%97 == 0 {
					key = "down" // an error of the store
				}
				d, err := l.AllowN(ctx, key, n)
				switch {
				case err != nil:
					told[which][observe.Failed].Add(1)
				case d.Allowed:
					told[which][observe.Allowed].Add(1)
				default:
					told[which][observe.Denied].Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	collected := make(chan int)
	go func() {
		last := map[string]int64{}
		n := 0
		defer func() { collected <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			for set, v := range values(collect(t, r)["floodgate.rate_limiting.requests"]) {
				if v < last[set] {
					t.Errorf("requests{%s} went from %d to %d", set, last[set], v)
				}
				last[set] = v
			}
			n++
		}
	}()
	wg.Wait()
	close(done)
	t.Logf("%d collections while deciding", <-collected)

	byResult := map[string]map[string]int64{"api": {}, "plan": {}}
	var bound int64
	for set, v := range values(collect(t, r)["floodgate.rate_limiting.requests"]) {
		kv := map[string]string{}
		for _, p := range strings.Split(set, ",") {
			k, val, _ := strings.Cut(p, "=")
			kv[k] = val
		}
		byResult[kv[limiter]][kv[result]] += v
		if kv[binding] != "" {
			bound += v
		}
	}
	for which, name := range []string{"api", "plan"} {
		for _, out := range []observe.Outcome{observe.Allowed, observe.Denied, observe.Failed} {
			if got, want := byResult[name][out.String()], told[which][out].Load(); got != want {
				t.Errorf("requests{%s, %s} = %d, the callers were told %d", name, out, got, want)
			}
		}
	}
	if want := told[1][observe.Denied].Load(); bound != want || want == 0 {
		t.Errorf("plan's denials by binding limit add up to %d, want all %d", bound, want)
	}
}

// TestConcurrentEvents sends a store's events of new and known label
// tuples from many goroutines at once, so that first uses race each other
// (run it with -race), and checks that no count is lost and that every
// node's breaker gauge ends in one state.
func TestConcurrentEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	const goroutines, rounds, names = 8, 200, 4
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for i := range rounds {
				node := fmt.Sprintf("127.0.0.1:%d", 7000+(g+i)%names)
				o.OnStoreCall(ctx, observe.StoreCall{Name: "redis", Node: node, Decisions: 1, Outcome: observe.CallOK, Latency: time.Microsecond})
				if i == rounds/2 {
					o.OnBreaker(ctx, observe.BreakerChange{Name: "redis", Node: node, From: observe.BreakerClosed, To: observe.BreakerOpen})
				}
			}
		})
	}
	wg.Wait()
	got := collect(t, r)
	var calls uint64
	for _, c := range counts(got["db.client.operation.duration"]) {
		calls += c
	}
	if calls != goroutines*rounds {
		t.Errorf("db.client.operation.duration counts %d calls, want %d", calls, goroutines*rounds)
	}
	perNode := map[string]int64{}
	for set, v := range values(got["floodgate.store.breaker.state"]) {
		for _, kv := range strings.Split(set, ",") {
			if k, port, _ := strings.Cut(kv, "="); k == "server.port" {
				perNode[port] += v
			}
		}
	}
	if len(perNode) != names {
		t.Errorf("breaker.state for %d nodes, want %d: %v", len(perNode), names, perNode)
	}
	for port, sum := range perNode {
		if sum != 1 {
			t.Errorf("breaker.state of node :%s sums to %d over its states, want 1", port, sum)
		}
	}
}
