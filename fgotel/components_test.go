package fgotel_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fgotel"
	"github.com/floodgate-go/floodgate/observe"
)

var errDown = fmt.Errorf("redisstore: %w: connection refused", floodgate.ErrUnavailable)

// storeAt returns the attributes of a store's instruments on a node.
func storeAt(name, host, port string, kv ...string) string {
	return attrs(append([]string{storeKey, name, "db.system.name", "redis", "server.address", host, "server.port", port}, kv...)...)
}

func TestStoreEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	const n1, n2, n3 = "127.0.0.1:6379", "127.0.0.2:7000", "[::1]:6380"
	for _, c := range []observe.StoreCall{
		{Name: "redis", Node: n1, Decisions: 1, Outcome: observe.CallOK, Latency: 100 * time.Microsecond},
		{Name: "redis", Node: n1, Decisions: 1, Outcome: observe.CallOK, Latency: 100 * time.Microsecond},
		{Name: "redis", Node: n1, Decisions: 4, Outcome: observe.CallOK, Latency: 200 * time.Microsecond},
		{Name: "redis", Node: n1, Decisions: 1, Outcome: observe.CallTimeout, Latency: 20 * time.Millisecond, Err: context.DeadlineExceeded},
		{Name: "redis", Node: n2, Decisions: 1, Outcome: observe.CallOK, Latency: 50 * time.Microsecond},
	} {
		o.OnStoreCall(ctx, c)
	}
	for _, b := range []observe.BreakerChange{
		{Name: "redis", Node: n1, From: observe.BreakerClosed, To: observe.BreakerOpen},
		{Name: "redis", Node: n1, From: observe.BreakerOpen, To: observe.BreakerHalfOpen},
		{Name: "redis", Node: n3, From: observe.BreakerClosed, To: observe.BreakerOpen},
	} {
		o.OnBreaker(ctx, b)
	}
	for _, f := range []observe.Failures{
		{Name: "redis", Node: n1, Policy: "open", Count: 2978, Err: errDown},
		{Name: "redis", Node: n1, Policy: "open", Count: 22, Err: errDown},
		{Name: "redis", Node: n3, Policy: "local", Count: 5, Err: errDown},
	} {
		o.OnFailures(ctx, f)
	}
	got := collect(t, r)

	dur := mustGet(t, got, "db.client.operation.duration", "histogram", "s")
	equal(t, "db.client.operation.duration count", counts(dur), map[string]uint64{
		storeAt("redis", "127.0.0.1", "6379"):                     3,
		storeAt("redis", "127.0.0.1", "6379", errType, "timeout"): 1,
		storeAt("redis", "127.0.0.2", "7000"):                     1,
	})
	if p := dur.points[storeAt("redis", "127.0.0.1", "6379")]; math.Abs(p.sum-400e-6) > 1e-12 {
		t.Errorf("db.client.operation.duration sum = %v, want 400e-6", p.sum)
	}
	equal(t, "store.decisions", values(mustGet(t, got, "floodgate.store.decisions", "counter", "{decision}")), map[string]int64{
		storeAt("redis", "127.0.0.1", "6379"):                     6,
		storeAt("redis", "127.0.0.1", "6379", errType, "timeout"): 1,
		storeAt("redis", "127.0.0.2", "7000"):                     1,
	})
	equal(t, "store.failures", values(mustGet(t, got, "floodgate.store.failures", "counter", "{decision}")), map[string]int64{
		storeAt("redis", "127.0.0.1", "6379", "floodgate.store.failure_policy", "open"): 3000,
		storeAt("redis", "::1", "6380", "floodgate.store.failure_policy", "local"):      5,
	})
	move := func(host, port, from, to string) string {
		return storeAt("redis", host, port, "floodgate.breaker.previous_state", from, "floodgate.breaker.state", to)
	}
	equal(t, "breaker.transitions", values(mustGet(t, got, "floodgate.store.breaker.transitions", "counter", "{transition}")), map[string]int64{
		move("127.0.0.1", "6379", "closed", "open"):    1,
		move("127.0.0.1", "6379", "open", "half-open"): 1,
		move("::1", "6380", "closed", "open"):          1,
	})
	state := func(host, port, s string) string { return storeAt("redis", host, port, "floodgate.breaker.state", s) }
	equal(t, "breaker.state", values(mustGet(t, got, "floodgate.store.breaker.state", "gauge", "1")), map[string]int64{
		state("127.0.0.1", "6379", "closed"): 0, state("127.0.0.1", "6379", "open"): 0, state("127.0.0.1", "6379", "half-open"): 1,
		state("127.0.0.2", "7000", "closed"): 1, state("127.0.0.2", "7000", "open"): 0, state("127.0.0.2", "7000", "half-open"): 0,
		state("::1", "6380", "closed"): 0, state("::1", "6380", "open"): 1, state("::1", "6380", "half-open"): 0,
	})
}

// TestStoreNodeWithoutPort checks the attributes of a node the client
// names without a port, and of a call that names no node.
func TestStoreNodeWithoutPort(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	o.OnStoreCall(context.Background(), observe.StoreCall{Name: "r", Node: "cache.internal", Decisions: 1, Outcome: observe.CallError, Latency: time.Millisecond})
	o.OnStoreCall(context.Background(), observe.StoreCall{Name: "r", Decisions: 1, Outcome: observe.CallOK, Latency: time.Millisecond})
	got := collect(t, r)
	equal(t, "db.client.operation.duration count", counts(got["db.client.operation.duration"]), map[string]uint64{
		attrs(storeKey, "r", "db.system.name", "redis", "server.address", "cache.internal", errType, "error"): 1,
		attrs(storeKey, "r", "db.system.name", "redis"):                                                       1,
	})
}

func TestLeaseEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	for _, l := range []observe.Lease{
		{Name: "lease", Key: "k", Units: 100, Granted: 100, Latency: 300 * time.Microsecond, Waited: 1},
		{Name: "lease", Key: "k", Units: 100, Granted: 40, Latency: 500 * time.Microsecond, Local: 99, Waited: 2},
		{Name: "lease", Key: "k", Units: 100, Err: errDown, Latency: 20 * time.Millisecond, Local: 40},
	} {
		o.OnLease(ctx, l)
	}
	for _, ret := range []observe.Return{
		{Name: "lease", Key: "k", Units: 30, Granted: 30, Reason: "expired"},
		{Name: "lease", Key: "k", Units: 10, Reason: "closed", Err: errDown},
	} {
		o.OnReturn(ctx, ret)
	}
	got := collect(t, r)
	lease := attrs(limiter, "lease")
	refill := mustGet(t, got, "floodgate.lease.refill.duration", "histogram", "s")
	equal(t, "lease.refill.duration count", counts(refill), map[string]uint64{
		lease: 2,
		attrs(limiter, "lease", errType, "unavailable"): 1,
	})
	if p := refill.points[lease]; math.Abs(p.sum-800e-6) > 1e-12 {
		t.Errorf("lease.refill.duration sum = %v, want 800e-6", p.sum)
	}
	equal(t, "lease.requested_units", values(mustGet(t, got, "floodgate.lease.requested_units", "counter", "{unit}")), map[string]int64{lease: 300})
	equal(t, "lease.granted_units", values(mustGet(t, got, "floodgate.lease.granted_units", "counter", "{unit}")), map[string]int64{lease: 140})
	equal(t, "lease.decisions", values(mustGet(t, got, "floodgate.lease.decisions", "counter", "{decision}")), map[string]int64{
		attrs(limiter, "lease", "floodgate.lease.source", "local"):  139,
		attrs(limiter, "lease", "floodgate.lease.source", "waited"): 3,
	})
	expired := attrs(limiter, "lease", "floodgate.lease.return_reason", "expired")
	equal(t, "lease.released_units", values(mustGet(t, got, "floodgate.lease.released_units", "counter", "{unit}")), map[string]int64{
		expired: 30,
		attrs(limiter, "lease", "floodgate.lease.return_reason", "closed", errType, "unavailable"): 10,
	})
	equal(t, "lease.refunded_units", values(mustGet(t, got, "floodgate.lease.refunded_units", "counter", "{unit}")), map[string]int64{expired: 30})
}

func TestAdaptiveAndShedEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	o.OnLimitChange(ctx, observe.LimitChange{Name: "adaptive", Old: 20, New: 25, InFlight: 3})
	o.OnLimitChange(ctx, observe.LimitChange{Name: "adaptive", Old: 25, New: 18, InFlight: 18})
	o.OnLimitChange(ctx, observe.LimitChange{Name: "other", Old: 10, New: 11})
	o.OnReject(ctx, observe.Reject{Name: "adaptive", Partition: "batch", Limit: 18, InFlight: 18, Reason: "timeout"})
	o.OnReject(ctx, observe.Reject{Name: "adaptive", Partition: "batch", Limit: 18, InFlight: 18, Reason: "timeout"})
	o.OnReject(ctx, observe.Reject{Name: "adaptive", Partition: "batch", Limit: 18, InFlight: 18, Reason: "queue"})
	o.OnReject(ctx, observe.Reject{Name: "adaptive", Limit: 18, InFlight: 18})
	for range 3 {
		o.OnShed(ctx, observe.Shed{Name: "cpu", Class: "sheddable", Utilization: 0.93, Threshold: 0.9})
	}
	o.OnShed(ctx, observe.Shed{Name: "cpu", Class: "critical", Utilization: 0.995, Threshold: 0.99})
	got := collect(t, r)
	equal(t, "adaptive.limit", values(mustGet(t, got, "floodgate.adaptive.limit", "gauge", "{request}")), map[string]int64{
		attrs(limiter, "adaptive"): 18,
		attrs(limiter, "other"):    11,
	})
	equal(t, "adaptive.rejected_requests", values(mustGet(t, got, "floodgate.adaptive.rejected_requests", "counter", "{request}")), map[string]int64{
		attrs(limiter, "adaptive", "floodgate.request.class", "batch", "floodgate.rejection.reason", "timeout"): 2,
		attrs(limiter, "adaptive", "floodgate.request.class", "batch", "floodgate.rejection.reason", "queue"):   1,
		attrs(limiter, "adaptive"): 1,
	})
	equal(t, "shed.shed_requests", values(mustGet(t, got, "floodgate.shed.shed_requests", "counter", "{request}")), map[string]int64{
		attrs("floodgate.shedder.name", "cpu", "floodgate.request.class", "sheddable"): 3,
		attrs("floodgate.shedder.name", "cpu", "floodgate.request.class", "critical"):  1,
	})
}

func TestInflightEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	for range 3 {
		o.OnAcquire(ctx, observe.Acquire{Name: "uploads", Key: "u", Outcome: observe.Allowed, Limit: 3, InFlight: 1})
	}
	o.OnAcquire(ctx, observe.Acquire{Name: "uploads", Key: "u", Outcome: observe.Denied, Limit: 3, InFlight: 3})
	o.OnAcquire(ctx, observe.Acquire{Name: "uploads", Key: "u", Outcome: observe.Failed, Err: errDown, Limit: 3})
	o.OnRelease(ctx, observe.Release{Name: "uploads", Key: "u", Held: 50 * time.Millisecond})
	o.OnRelease(ctx, observe.Release{Name: "uploads", Key: "u", Held: 150 * time.Millisecond})
	got := collect(t, r)
	up := attrs(limiter, "uploads")
	equal(t, "inflight.active_requests", values(mustGet(t, got, "floodgate.inflight.active_requests", "updowncounter", "{request}")), map[string]int64{up: 1})

	o.OnRelease(ctx, observe.Release{Name: "uploads", Key: "u", Held: time.Second, Err: errDown})
	got = collect(t, r)
	equal(t, "inflight.requests", values(mustGet(t, got, "floodgate.inflight.requests", "counter", "{request}")), map[string]int64{
		attrs(limiter, "uploads", result, "allowed"):                       3,
		attrs(limiter, "uploads", result, "denied"):                        1,
		attrs(limiter, "uploads", result, "error", errType, "unavailable"): 1,
	})
	equal(t, "inflight.active_requests", values(mustGet(t, got, "floodgate.inflight.active_requests", "updowncounter", "{request}")), map[string]int64{up: 0})
	held := mustGet(t, got, "floodgate.inflight.hold.duration", "histogram", "s")
	equal(t, "inflight.hold.duration count", counts(held), map[string]uint64{
		up: 2,
		attrs(limiter, "uploads", errType, "unavailable"): 1,
	})
	if p := held.points[up]; math.Abs(p.sum-0.2) > 1e-12 {
		t.Errorf("inflight.hold.duration sum = %v, want 0.2", p.sum)
	}
	if p := held.points[up]; len(p.bounds) == 0 || p.bounds[0] != 0.001 || p.bounds[len(p.bounds)-1] != 60 {
		t.Errorf("inflight.hold.duration bounds = %v, want 1ms to 60s", p.bounds)
	}
}

// everyEvent makes every kind of event on m's Observer, each with key
// where the event has a key: the decisions of observed memstore
// limiters (a single algorithm and a composite, every one timed), and
// one event of every other kind given to the Observer directly.
func everyEvent(t *testing.T, m *fgotel.Metrics, key string) {
	t.Helper()
	o := m.Observer()
	o.LatencyEvery = 1
	ctx := context.Background()
	api := observed(t, "api", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, nil, o)
	_, _ = api.Allow(ctx, key)
	_, _ = api.Reserve(ctx, key, 1, time.Hour) // admitted to wait
	_, _ = api.Allow(ctx, "down")              // failed: the store is down
	_, _ = api.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil)
	plan := observed(t, "plan", floodgate.Limits{
		floodgate.FixedWindow{Limit: 1, Window: time.Hour},
		floodgate.FixedWindow{Limit: 5, Window: 24 * time.Hour},
	}, nil, o)
	_, _ = plan.Allow(ctx, key)
	_, _ = plan.Allow(ctx, key) // denied by limit 0
	o.OnStoreCall(ctx, observe.StoreCall{Name: "redis", Node: "127.0.0.1:6379", Decisions: 1, Outcome: observe.CallOK, Latency: time.Millisecond})
	o.OnFailures(ctx, observe.Failures{Name: "redis", Node: "127.0.0.1:6379", Policy: "open", Count: 1, Err: errDown})
	o.OnBreaker(ctx, observe.BreakerChange{Name: "redis", Node: "127.0.0.1:6379", From: observe.BreakerClosed, To: observe.BreakerOpen})
	o.OnLease(ctx, observe.Lease{Name: "lease", Key: key, Units: 10, Granted: 10, Latency: time.Millisecond, Local: 1, Waited: 1})
	o.OnReturn(ctx, observe.Return{Name: "lease", Key: key, Units: 1, Granted: 1, Reason: "expired"})
	o.OnLimitChange(ctx, observe.LimitChange{Name: "adaptive", Old: 1, New: 2})
	o.OnReject(ctx, observe.Reject{Name: "adaptive", Partition: "batch"})
	o.OnShed(ctx, observe.Shed{Name: "cpu", Class: "sheddable"})
	o.OnAcquire(ctx, observe.Acquire{Name: "uploads", Key: key, Outcome: observe.Allowed})
	o.OnRelease(ctx, observe.Release{Name: "uploads", Key: key, Held: time.Millisecond})
}

// TestNoKeyInAttributes checks that no attribute of any point carries a
// key given to an event.
func TestNoKeyInAttributes(t *testing.T) {
	m, r := newMetrics(t, nil)
	everyEvent(t, m, "secret-user-key")
	for name, in := range collect(t, r) {
		for k := range in.points {
			if strings.Contains(k, "secret-user-key") {
				t.Errorf("%s has a point {%s} carrying the key", name, k)
			}
		}
	}
}
