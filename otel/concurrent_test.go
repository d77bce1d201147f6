package fgotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// TestConcurrentEvents sends events of new and known label tuples from
// many goroutines at once, so that first uses race each other (run it
// with -race), and checks that no count is lost and that every node's
// breaker gauge ends in one state.
func TestConcurrentEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	const goroutines, rounds, names = 8, 200, 4
	outcomes := []observe.Outcome{observe.Allowed, observe.Denied, observe.Failed}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for i := range rounds {
				name := fmt.Sprintf("l%d", (g+i)%names)
				d := observe.Decision{Name: name, N: 1, Outcome: outcomes[i%3], Limits: 2,
					Decision: floodgate.Decision{Binding: i % 2}}
				if d.Outcome == observe.Failed {
					d.Err = errDown
				}
				o.OnDecision(ctx, d)
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

	var total int64
	for _, v := range values(got["floodgate.rate_limiting.requests"]) {
		total += v
	}
	if total != goroutines*rounds {
		t.Errorf("requests sum to %d, want %d", total, goroutines*rounds)
	}
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
