package fgprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fgprom"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func newMetrics(t testing.TB, opts *fgprom.Options) *fgprom.Metrics {
	t.Helper()
	m, err := fgprom.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// errDown is the error of a step on the key "down" of a downStore.
var errDown = fmt.Errorf("%w: test: the node is down", floodgate.ErrUnavailable)

// downStore is a Store whose steps on the key "down" fail with errDown,
// as a remote store's do when its node is unreachable: the decisions the
// adapter counts with outcome error.
type downStore struct{ floodgate.Store }

func (s downStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return downBound{b}, nil
}

type downBound struct{ floodgate.Bound }

func (b downBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if key == "down" {
		return floodgate.Decision{}, errDown
	}
	return b.Bound.Take(ctx, key, n)
}

func (b downBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if key == "down" {
		return floodgate.Result{}, errDown
	}
	return b.Bound.Apply(ctx, key, req, each)
}

// newStore returns a memstore whose clock is now, under a downStore.
func newStore(t testing.TB, now func() time.Time) floodgate.Store {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return downStore{s}
}

func newLimiter(t testing.TB, alg floodgate.Algorithm, now func() time.Time) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(newStore(t, now), alg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newObserved returns a limiter of alg named name on a store of newStore
// wrapped by observe.Store with o.
func newObserved(t testing.TB, alg floodgate.Algorithm, now func() time.Time, name string, o *observe.Observer) *floodgate.Limiter {
	t.Helper()
	s, err := observe.Store(newStore(t, now), o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, alg, &floodgate.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// t0 is the instant of the fixed clocks of the tests.
var t0 = time.Unix(1_700_000_000, 0)

func fixed() time.Time { return t0 }

// fireAll returns a function that gives o one event of every kind, so
// that every metric has a series: a decision of limiter api, observed
// with o (a floodgate.Limits, so that limit_binding_total has series
// too), and one call of each of o's other functions. The first call
// admits 2 units, bound by the fixed window (limit 1); later calls are
// denied by it.
func fireAll(t testing.TB, o *observe.Observer) func() {
	t.Helper()
	l := newObserved(t, floodgate.Limits{
		floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Hour},
	}, fixed, "api", o)
	ctx := context.Background()
	unavailable := floodgate.ErrUnavailable
	return func() {
		_, _ = l.AllowN(ctx, "user-1", 2)
		o.OnStoreCall(ctx, observe.StoreCall{Name: "redis", Node: "127.0.0.1:6379", Decisions: 3, Outcome: observe.CallOK, Latency: 400 * time.Microsecond})
		o.OnFailures(ctx, observe.Failures{Name: "redis", Node: "127.0.0.1:6379", Policy: "open", Count: 7, Err: unavailable})
		o.OnBreaker(ctx, observe.BreakerChange{Name: "redis", Node: "127.0.0.1:6379", From: observe.BreakerClosed, To: observe.BreakerOpen})
		o.OnLease(ctx, observe.Lease{Name: "leased", Key: "user-1", Units: 10, Granted: 8, Latency: time.Millisecond, Local: 30, Waited: 2})
		o.OnReturn(ctx, observe.Return{Name: "leased", Key: "user-1", Units: 5, Granted: 4, Reason: "expired"})
		o.OnLimitChange(ctx, observe.LimitChange{Name: "adaptive", Old: 20, New: 24, InFlight: 3})
		o.OnReject(ctx, observe.Reject{Name: "adaptive", Partition: "batch", Limit: 24, InFlight: 24, Reason: "queue"})
		o.OnShed(ctx, observe.Shed{Name: "shedder", Class: "sheddable", Utilization: 0.93, Threshold: 0.9})
		o.OnAcquire(ctx, observe.Acquire{Name: "uploads", Key: "user-1", Outcome: observe.Allowed, Limit: 2, InFlight: 1})
		o.OnAcquire(ctx, observe.Acquire{Name: "uploads", Key: "user-1", Outcome: observe.Allowed, Limit: 2, InFlight: 2})
		o.OnRelease(ctx, observe.Release{Name: "uploads", Key: "user-1", Held: 1500 * time.Millisecond})
	}
}

// families gathers m after one fireAll, with every decision timed, by
// name.
func families(t testing.TB, m *fgprom.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	o := m.Observer()
	o.LatencyEvery = 1
	fireAll(t, o)()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	// fireAll must reach every metric, or the tests built on it would
	// miss one.
	descs := make(chan *prometheus.Desc, 100)
	m.Describe(descs)
	close(descs)
	if n := len(descs); n != len(out) {
		t.Fatalf("fireAll gave %d of the %d metrics a series", len(out), n)
	}
	return out
}

func TestDecisions(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	o.LatencyEvery = 1
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 3}, fixed, "api", o)
	ctx := context.Background()
	for i := range 5 {
		if _, err := l.AllowN(ctx, "user-1", 1); err != nil {
			t.Fatalf("AllowN #%d: %v", i, err)
		}
	}
	// AllowN hands its arguments to the store, which refuses bad ones: an
	// error. Reserve refuses them before the store: not counted.
	if _, err := l.AllowN(ctx, "", 1); !errors.Is(err, floodgate.ErrEmptyKey) {
		t.Fatalf("AllowN(\"\") = %v, want ErrEmptyKey", err)
	}
	if _, err := l.Reserve(ctx, "", 1, time.Second); !errors.Is(err, floodgate.ErrEmptyKey) {
		t.Fatalf("Reserve(\"\") = %v, want ErrEmptyKey", err)
	}
	// The store fails: an error.
	if _, err := l.AllowN(ctx, "down", 1); !errors.Is(err, errDown) {
		t.Fatalf("AllowN(down) = %v, want %v", err, errDown)
	}
	if _, err := l.Apply(ctx, "user-1", floodgate.Request{Op: floodgate.OpSettle, N: -2, At: t0}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(ctx, "user-1", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP floodgate_decisions_total Decisions of a limiter on a store wrapped by observe.Store, by op (take, take_up_to, settle, refund, check) and outcome (allowed, denied, error).
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{limiter="api",op="check",outcome="allowed"} 1
floodgate_decisions_total{limiter="api",op="refund",outcome="allowed"} 1
floodgate_decisions_total{limiter="api",op="take",outcome="allowed"} 3
floodgate_decisions_total{limiter="api",op="take",outcome="denied"} 2
floodgate_decisions_total{limiter="api",op="take",outcome="error"} 2
# HELP floodgate_decision_units_total Units asked for by the decisions of a limiter on a store wrapped by observe.Store (for settle, charged; for refund, given back), by op and outcome.
# TYPE floodgate_decision_units_total counter
floodgate_decision_units_total{limiter="api",op="check",outcome="allowed"} 1
floodgate_decision_units_total{limiter="api",op="refund",outcome="allowed"} 2
floodgate_decision_units_total{limiter="api",op="take",outcome="allowed"} 3
floodgate_decision_units_total{limiter="api",op="take",outcome="denied"} 2
floodgate_decision_units_total{limiter="api",op="take",outcome="error"} 2
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_decisions_total", "floodgate_decision_units_total"); err != nil {
		t.Error(err)
	}
	// Every decision was timed (LatencyEvery 1): 9 observations,
	// their sum above 0.
	if n := testutil.CollectAndCount(m, "floodgate_decision_duration_seconds"); n != 1 {
		t.Errorf("decision_duration_seconds has %d series, want 1 (limiter api)", n)
	}
	h := histogram(t, m, "floodgate_decision_duration_seconds")
	if h.GetSampleCount() != 9 || h.GetSampleSum() <= 0 {
		t.Errorf("decision_duration_seconds: count %d sum %v, want 9 and > 0", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestDecisionsDerivedName checks that a limiter built without a Name is
// labelled with the name derived from its configuration.
func TestDecisionsDerivedName(t *testing.T) {
	m := newMetrics(t, nil)
	s, err := observe.Store(newStore(t, fixed), m.Observer())
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), "user-1"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"limiter": "tb:100/1s:b200", "op": "take", "outcome": "allowed"}
	if l.Name() != labels["limiter"] {
		t.Fatalf("Name() = %q, want %q", l.Name(), labels["limiter"])
	}
	if got := counterValue(t, m, "floodgate_decisions_total", labels); got != 1 {
		t.Errorf("decisions_total%v = %v, want 1", labels, got)
	}
}

// TestDecisionSeriesAtZero checks which decision series exist before any
// decision: a limiter's takes by outcome and a composite's binding
// limits, at 0, from the moment it is observed; no other op.
func TestDecisionSeriesAtZero(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, nil, "api", o)
	newObserved(t, floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 100, Window: time.Minute},
	}, nil, "plans", o)
	want := `
# HELP floodgate_decisions_total Decisions of a limiter on a store wrapped by observe.Store, by op (take, take_up_to, settle, refund, check) and outcome (allowed, denied, error).
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{limiter="api",op="take",outcome="allowed"} 0
floodgate_decisions_total{limiter="api",op="take",outcome="denied"} 0
floodgate_decisions_total{limiter="api",op="take",outcome="error"} 0
floodgate_decisions_total{limiter="plans",op="take",outcome="allowed"} 0
floodgate_decisions_total{limiter="plans",op="take",outcome="denied"} 0
floodgate_decisions_total{limiter="plans",op="take",outcome="error"} 0
# HELP floodgate_decision_units_total Units asked for by the decisions of a limiter on a store wrapped by observe.Store (for settle, charged; for refund, given back), by op and outcome.
# TYPE floodgate_decision_units_total counter
floodgate_decision_units_total{limiter="api",op="take",outcome="allowed"} 0
floodgate_decision_units_total{limiter="api",op="take",outcome="denied"} 0
floodgate_decision_units_total{limiter="api",op="take",outcome="error"} 0
floodgate_decision_units_total{limiter="plans",op="take",outcome="allowed"} 0
floodgate_decision_units_total{limiter="plans",op="take",outcome="denied"} 0
floodgate_decision_units_total{limiter="plans",op="take",outcome="error"} 0
# HELP floodgate_limit_binding_total Takes of a floodgate.Limits composite on a store wrapped by observe.Store, by the index of the limit that bound them (the denying one on a denial) and outcome.
# TYPE floodgate_limit_binding_total counter
floodgate_limit_binding_total{limit="0",limiter="plans",outcome="allowed"} 0
floodgate_limit_binding_total{limit="0",limiter="plans",outcome="denied"} 0
floodgate_limit_binding_total{limit="1",limiter="plans",outcome="allowed"} 0
floodgate_limit_binding_total{limit="1",limiter="plans",outcome="denied"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"floodgate_decisions_total", "floodgate_decision_units_total", "floodgate_limit_binding_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m, "floodgate_decision_duration_seconds"); n != 0 {
		t.Errorf("decision_duration_seconds has %d series before any decision, want 0", n)
	}
}

// TestDecisionsOfOneName checks that limiters observed under one name
// are counted as one, whichever Observer of the Metrics their stores were
// wrapped with.
func TestDecisionsOfOneName(t *testing.T) {
	m := newMetrics(t, nil)
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 2}
	// Two stores, each wrapped with its own Observer of m.
	a := newObserved(t, alg, fixed, "api", m.Observer())
	b := newObserved(t, alg, fixed, "api", m.Observer())
	ctx := context.Background()
	for range 3 {
		_, _ = a.Allow(ctx, "user-1")
		_, _ = b.Allow(ctx, "user-1")
	}
	// The limiters decide on stores apart: each admits 2 of 3.
	for outcome, want := range map[string]float64{"allowed": 4, "denied": 2, "error": 0} {
		if got := counterValue(t, m, "floodgate_decisions_total", map[string]string{"limiter": "api", "op": "take", "outcome": outcome}); got != want {
			t.Errorf("decisions_total{limiter=api,op=take,outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
}

// TestDecisionsInvalidName checks that a limiter name Prometheus refuses
// (not UTF-8) is refused by floodgate.New and by the Bind of an
// observe.Store, and that a timed decision of such a name handed to
// OnTimed directly is dropped instead of panicking on the caller's
// goroutine.
func TestDecisionsInvalidName(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	s, err := observe.Store(newStore(t, nil), o)
	if err != nil {
		t.Fatal(err)
	}
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}
	if _, err := floodgate.New(s, alg, &floodgate.Options{Name: "\xff"}); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("floodgate.New with a name that is not UTF-8: %v, want ErrInvalidConfig", err)
	}
	if _, err := s.Bind("\xff", alg); !errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Fatalf("Bind with a name that is not UTF-8: %v, want ErrInvalidConfig", err)
	}
	o.OnTimed(context.Background(), observe.DecisionEvent{Name: "\xff", Outcome: observe.Allowed, N: 1, Latency: time.Millisecond})
	if n := testutil.CollectAndCount(m, "floodgate_decision_duration_seconds"); n != 0 {
		t.Errorf("decision_duration_seconds has %d series after a name that is not UTF-8, want none", n)
	}
	// Nothing was counted under it either: the scrape succeeds.
	if _, err := testutil.CollectAndLint(m); err != nil {
		t.Errorf("a scrape after a refused name: %v", err)
	}
}

// counterValue returns the sum of the counters of name in c whose labels
// include labels.
func counterValue(t testing.TB, c prometheus.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, mt := range gather(t, c)[name].GetMetric() {
		match := true
		for k, v := range labels {
			match = match && label(mt, k) == v
		}
		if match {
			sum += mt.GetCounter().GetValue()
		}
	}
	return sum
}

// histogram returns the one histogram series of name in c.
func histogram(t *testing.T, c prometheus.Collector, name string) *dto.Histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if len(mf.Metric) != 1 {
				t.Fatalf("%s has %d series, want 1", name, len(mf.Metric))
			}
			return mf.Metric[0].GetHistogram()
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

// TestDecisionsOfWaitAndLimits checks that a Wait is counted as the take
// it makes, with its binding limit, and a Wait whose context ends during
// its delay as that take and a refund.
func TestDecisionsOfWaitAndLimits(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	// A Wait on cancelled is cancelled when its take is timed (every
	// decision is), before its delay passes.
	o.LatencyEvery = 1
	onTimed := o.OnTimed
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.OnTimed = func(ctx context.Context, e observe.DecisionEvent) {
		onTimed(ctx, e)
		if ctx == cancelled && e.Decision.Delay > 0 {
			cancel()
		}
	}
	l := newObserved(t, floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Hour, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Hour},
	}, fixed, "plans", o)
	ctx := context.Background()
	for range 3 {
		if _, err := l.Allow(ctx, "user-1"); err != nil {
			t.Fatal(err)
		}
	}
	// The window of user-1 is spent for up to an hour: denied.
	minute, cancelMinute := context.WithTimeout(ctx, time.Minute)
	defer cancelMinute()
	if err := l.Wait(minute, "user-1", 1); !errors.Is(err, floodgate.ErrWaitExceedsDeadline) {
		t.Fatalf("Wait past the window's limit = %v, want ErrWaitExceedsDeadline", err)
	}
	if err := l.Wait(ctx, "user-2", 1); err != nil {
		t.Fatal(err)
	}
	// A limiter of one unit an hour: its second take waits for an hour,
	// and gives up.
	w := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1}, fixed, "w", o)
	if _, err := w.Allow(ctx, "user-3"); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(cancelled, "user-3", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled = %v, want context.Canceled", err)
	}

	// The fixed window (index 1) has the fewest units left after each
	// admission, and denied the third Allow and the Wait.
	want := `
# HELP floodgate_decisions_total Decisions of a limiter on a store wrapped by observe.Store, by op (take, take_up_to, settle, refund, check) and outcome (allowed, denied, error).
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{limiter="plans",op="take",outcome="allowed"} 3
floodgate_decisions_total{limiter="plans",op="take",outcome="denied"} 2
floodgate_decisions_total{limiter="plans",op="take",outcome="error"} 0
floodgate_decisions_total{limiter="w",op="refund",outcome="allowed"} 1
floodgate_decisions_total{limiter="w",op="take",outcome="allowed"} 2
floodgate_decisions_total{limiter="w",op="take",outcome="denied"} 0
floodgate_decisions_total{limiter="w",op="take",outcome="error"} 0
# HELP floodgate_limit_binding_total Takes of a floodgate.Limits composite on a store wrapped by observe.Store, by the index of the limit that bound them (the denying one on a denial) and outcome.
# TYPE floodgate_limit_binding_total counter
floodgate_limit_binding_total{limit="0",limiter="plans",outcome="allowed"} 0
floodgate_limit_binding_total{limit="0",limiter="plans",outcome="denied"} 0
floodgate_limit_binding_total{limit="1",limiter="plans",outcome="allowed"} 3
floodgate_limit_binding_total{limit="1",limiter="plans",outcome="denied"} 2
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_decisions_total", "floodgate_limit_binding_total"); err != nil {
		t.Error(err)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestEveryEvent(t *testing.T) {
	m := newMetrics(t, &fgprom.Options{ConstLabels: prometheus.Labels{"region": "eu"}})
	families(t, m) // fires every event once
	want := `
# HELP floodgate_store_calls_total Round trips of a remote store to a node, by outcome (ok, timeout, error).
# TYPE floodgate_store_calls_total counter
floodgate_store_calls_total{node="127.0.0.1:6379",outcome="ok",region="eu",store="redis"} 1
floodgate_store_calls_total{node="127.0.0.1:6379",outcome="timeout",region="eu",store="redis"} 0
floodgate_store_calls_total{node="127.0.0.1:6379",outcome="error",region="eu",store="redis"} 0
# HELP floodgate_store_failures_total Decisions a store could not make on a node, by what its failure policy did (open, closed, local, error).
# TYPE floodgate_store_failures_total counter
floodgate_store_failures_total{node="127.0.0.1:6379",policy="open",region="eu",store="redis"} 7
floodgate_store_failures_total{node="127.0.0.1:6379",policy="closed",region="eu",store="redis"} 0
floodgate_store_failures_total{node="127.0.0.1:6379",policy="local",region="eu",store="redis"} 0
floodgate_store_failures_total{node="127.0.0.1:6379",policy="error",region="eu",store="redis"} 0
# HELP floodgate_breaker_state State of a node's circuit breaker: 0 closed, 1 half-open, 2 open. Set at the node's first round trip (closed) and at every change.
# TYPE floodgate_breaker_state gauge
floodgate_breaker_state{node="127.0.0.1:6379",region="eu",store="redis"} 2
# HELP floodgate_breaker_transitions_total Changes of a node's circuit breaker, by the state changed to (closed, half-open, open).
# TYPE floodgate_breaker_transitions_total counter
floodgate_breaker_transitions_total{node="127.0.0.1:6379",region="eu",store="redis",to="open"} 1
floodgate_breaker_transitions_total{node="127.0.0.1:6379",region="eu",store="redis",to="closed"} 0
floodgate_breaker_transitions_total{node="127.0.0.1:6379",region="eu",store="redis",to="half-open"} 0
# HELP floodgate_lease_round_trips_total Lease round trips of a limiter on a lease.Store to the store under it, by outcome (granted: some units leased, denied: none, error).
# TYPE floodgate_lease_round_trips_total counter
floodgate_lease_round_trips_total{limiter="leased",outcome="granted",region="eu"} 1
floodgate_lease_round_trips_total{limiter="leased",outcome="denied",region="eu"} 0
floodgate_lease_round_trips_total{limiter="leased",outcome="error",region="eu"} 0
# HELP floodgate_lease_units_total Units a limiter on a lease.Store leased from the store under it (kind leased) and gave back to it (kind returned, as many as that store took back).
# TYPE floodgate_lease_units_total counter
floodgate_lease_units_total{kind="leased",limiter="leased",region="eu"} 8
floodgate_lease_units_total{kind="returned",limiter="leased",region="eu"} 4
# HELP floodgate_lease_returns_total Returns of unused units by a limiter on a lease.Store, by reason (expired, replaced, closed).
# TYPE floodgate_lease_returns_total counter
floodgate_lease_returns_total{limiter="leased",reason="expired",region="eu"} 1
# HELP floodgate_lease_decisions_total Decisions of a limiter on a lease.Store served from its local pools (source local) or that waited for a round trip (source waited): the local hit ratio.
# TYPE floodgate_lease_decisions_total counter
floodgate_lease_decisions_total{limiter="leased",region="eu",source="local"} 30
floodgate_lease_decisions_total{limiter="leased",region="eu",source="waited"} 2
# HELP floodgate_adaptive_limit Concurrency limit of an adaptive.Limiter, set at each change.
# TYPE floodgate_adaptive_limit gauge
floodgate_adaptive_limit{limiter="adaptive",region="eu"} 24
# HELP floodgate_adaptive_rejections_total Requests an adaptive.Limiter rejected, by the partition they asked for (empty for none) and reason (limit, queue, timeout, canceled).
# TYPE floodgate_adaptive_rejections_total counter
floodgate_adaptive_rejections_total{limiter="adaptive",partition="batch",reason="queue",region="eu"} 1
# HELP floodgate_shed_total Requests a shed.Shedder shed, by criticality class.
# TYPE floodgate_shed_total counter
floodgate_shed_total{class="sheddable",region="eu",shedder="shedder"} 1
# HELP floodgate_inflight_acquires_total Acquisitions of an inflight.Limiter, by outcome (allowed, denied, error).
# TYPE floodgate_inflight_acquires_total counter
floodgate_inflight_acquires_total{limiter="uploads",outcome="allowed",region="eu"} 2
floodgate_inflight_acquires_total{limiter="uploads",outcome="denied",region="eu"} 0
floodgate_inflight_acquires_total{limiter="uploads",outcome="error",region="eu"} 0
# HELP floodgate_inflight_requests Slots of an inflight.Limiter this process holds: its admitted acquisitions minus its releases.
# TYPE floodgate_inflight_requests gauge
floodgate_inflight_requests{limiter="uploads",region="eu"} 1
# HELP floodgate_decisions_total Decisions of a limiter on a store wrapped by observe.Store, by op (take, take_up_to, settle, refund, check) and outcome (allowed, denied, error).
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{limiter="api",op="take",outcome="allowed",region="eu"} 1
floodgate_decisions_total{limiter="api",op="take",outcome="denied",region="eu"} 0
floodgate_decisions_total{limiter="api",op="take",outcome="error",region="eu"} 0
# HELP floodgate_decision_units_total Units asked for by the decisions of a limiter on a store wrapped by observe.Store (for settle, charged; for refund, given back), by op and outcome.
# TYPE floodgate_decision_units_total counter
floodgate_decision_units_total{limiter="api",op="take",outcome="allowed",region="eu"} 2
floodgate_decision_units_total{limiter="api",op="take",outcome="denied",region="eu"} 0
floodgate_decision_units_total{limiter="api",op="take",outcome="error",region="eu"} 0
# HELP floodgate_limit_binding_total Takes of a floodgate.Limits composite on a store wrapped by observe.Store, by the index of the limit that bound them (the denying one on a denial) and outcome.
# TYPE floodgate_limit_binding_total counter
floodgate_limit_binding_total{limit="0",limiter="api",outcome="allowed",region="eu"} 0
floodgate_limit_binding_total{limit="0",limiter="api",outcome="denied",region="eu"} 0
floodgate_limit_binding_total{limit="1",limiter="api",outcome="allowed",region="eu"} 1
floodgate_limit_binding_total{limit="1",limiter="api",outcome="denied",region="eu"} 0
`
	names := []string{
		"floodgate_store_calls_total", "floodgate_store_failures_total", "floodgate_breaker_state",
		"floodgate_breaker_transitions_total", "floodgate_lease_round_trips_total", "floodgate_lease_units_total",
		"floodgate_lease_returns_total", "floodgate_lease_decisions_total", "floodgate_adaptive_limit",
		"floodgate_adaptive_rejections_total", "floodgate_shed_total", "floodgate_inflight_acquires_total",
		"floodgate_inflight_requests", "floodgate_decisions_total", "floodgate_decision_units_total",
		"floodgate_limit_binding_total",
	}
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	for name, want := range map[string]struct {
		count uint64
		sum   float64
	}{
		"floodgate_store_call_duration_seconds":       {1, 400e-6},
		"floodgate_store_call_decisions":              {1, 3},
		"floodgate_lease_round_trip_duration_seconds": {1, 1e-3},
		"floodgate_inflight_hold_seconds":             {1, 1.5},
	} {
		h := histogram(t, m, name)
		if h.GetSampleCount() != want.count || h.GetSampleSum() != want.sum {
			t.Errorf("%s: count %d sum %v, want %d and %v", name, h.GetSampleCount(), h.GetSampleSum(), want.count, want.sum)
		}
	}
	// The one decision was timed (families sets LatencyEvery 1).
	if h := histogram(t, m, "floodgate_decision_duration_seconds"); h.GetSampleCount() != 1 || h.GetSampleSum() <= 0 {
		t.Errorf("decision_duration_seconds: count %d sum %v, want 1 and > 0", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestOnTimed checks that the Observer's OnTimed observes the latency of
// each decision it is given, as it is.
func TestOnTimed(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	if o.OnDecision != nil {
		t.Error("Observer sets OnDecision: decisions are counted by its Tally")
	}
	ctx := context.Background()
	var sum float64
	for _, l := range []time.Duration{30 * time.Microsecond, 2 * time.Millisecond} {
		o.OnTimed(ctx, observe.DecisionEvent{Name: "api", Op: floodgate.OpTake, N: 1, Outcome: observe.Allowed, Latency: l})
		sum += l.Seconds()
	}
	h := histogram(t, m, "floodgate_decision_duration_seconds")
	if h.GetSampleCount() != 2 || h.GetSampleSum() != sum {
		t.Errorf("decision_duration_seconds: count %d sum %v, want 2 and %v", h.GetSampleCount(), h.GetSampleSum(), sum)
	}
	// OnTimed feeds only the histogram: decisions are the Tally's.
	if n := testutil.CollectAndCount(m, "floodgate_decisions_total"); n != 0 {
		t.Errorf("decisions_total has %d series after OnTimed alone, want 0", n)
	}
}

func TestBreakerStateValues(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	node := func(n string) float64 {
		for _, mt := range gather(t, m)["floodgate_breaker_state"].GetMetric() {
			if label(mt, "node") == n {
				return mt.GetGauge().GetValue()
			}
		}
		t.Fatalf("no breaker_state for node %q", n)
		return 0
	}
	// A node's first round trip shows its breaker closed.
	o.OnStoreCall(ctx, observe.StoreCall{Name: "redis", Node: "a:6379", Decisions: 1, Outcome: observe.CallOK, Latency: time.Millisecond})
	if v := node("a:6379"); v != 0 {
		t.Errorf("breaker_state after a round trip = %v, want 0", v)
	}
	for _, tc := range []struct {
		from, to observe.BreakerState
		want     float64
	}{
		{observe.BreakerClosed, observe.BreakerOpen, 2},
		{observe.BreakerOpen, observe.BreakerHalfOpen, 1},
		{observe.BreakerHalfOpen, observe.BreakerOpen, 2},
		{observe.BreakerOpen, observe.BreakerHalfOpen, 1},
		{observe.BreakerHalfOpen, observe.BreakerClosed, 0},
	} {
		o.OnBreaker(ctx, observe.BreakerChange{Name: "redis", Node: "a:6379", From: tc.from, To: tc.to})
		if v := node("a:6379"); v != tc.want {
			t.Errorf("breaker_state after %v -> %v = %v, want %v", tc.from, tc.to, v, tc.want)
		}
	}
	// A later round trip does not reset it.
	o.OnBreaker(ctx, observe.BreakerChange{Name: "redis", Node: "a:6379", From: observe.BreakerClosed, To: observe.BreakerOpen})
	o.OnStoreCall(ctx, observe.StoreCall{Name: "redis", Node: "a:6379", Decisions: 1, Outcome: observe.CallError})
	if v := node("a:6379"); v != 2 {
		t.Errorf("breaker_state after a failed round trip of an open breaker = %v, want 2", v)
	}
	want := `
# HELP floodgate_breaker_transitions_total Changes of a node's circuit breaker, by the state changed to (closed, half-open, open).
# TYPE floodgate_breaker_transitions_total counter
floodgate_breaker_transitions_total{node="a:6379",store="redis",to="closed"} 1
floodgate_breaker_transitions_total{node="a:6379",store="redis",to="half-open"} 2
floodgate_breaker_transitions_total{node="a:6379",store="redis",to="open"} 3
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_breaker_transitions_total"); err != nil {
		t.Error(err)
	}
}

// gather gathers c, by name.
func gather(t testing.TB, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestLeaseOutcomes(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	o.OnLease(ctx, observe.Lease{Name: "l", Units: 10, Granted: 10, Waited: 1})
	o.OnLease(ctx, observe.Lease{Name: "l", Units: 10, Granted: 0, Local: 9})
	o.OnLease(ctx, observe.Lease{Name: "l", Units: 10, Err: floodgate.ErrUnavailable, Waited: 3})
	o.OnReturn(ctx, observe.Return{Name: "l", Units: 6, Granted: 0, Reason: "closed", Err: floodgate.ErrUnavailable})
	want := `
# HELP floodgate_lease_round_trips_total Lease round trips of a limiter on a lease.Store to the store under it, by outcome (granted: some units leased, denied: none, error).
# TYPE floodgate_lease_round_trips_total counter
floodgate_lease_round_trips_total{limiter="l",outcome="denied"} 1
floodgate_lease_round_trips_total{limiter="l",outcome="error"} 1
floodgate_lease_round_trips_total{limiter="l",outcome="granted"} 1
# HELP floodgate_lease_units_total Units a limiter on a lease.Store leased from the store under it (kind leased) and gave back to it (kind returned, as many as that store took back).
# TYPE floodgate_lease_units_total counter
floodgate_lease_units_total{kind="leased",limiter="l"} 10
floodgate_lease_units_total{kind="returned",limiter="l"} 0
# HELP floodgate_lease_decisions_total Decisions of a limiter on a lease.Store served from its local pools (source local) or that waited for a round trip (source waited): the local hit ratio.
# TYPE floodgate_lease_decisions_total counter
floodgate_lease_decisions_total{limiter="l",source="local"} 9
floodgate_lease_decisions_total{limiter="l",source="waited"} 4
# HELP floodgate_lease_returns_total Returns of unused units by a limiter on a lease.Store, by reason (expired, replaced, closed).
# TYPE floodgate_lease_returns_total counter
floodgate_lease_returns_total{limiter="l",reason="closed"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want),
		"floodgate_lease_round_trips_total", "floodgate_lease_units_total", "floodgate_lease_decisions_total", "floodgate_lease_returns_total"); err != nil {
		t.Error(err)
	}
}

func TestInflightGauge(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	ctx := context.Background()
	for range 5 {
		o.OnAcquire(ctx, observe.Acquire{Name: "up", Outcome: observe.Allowed})
	}
	o.OnAcquire(ctx, observe.Acquire{Name: "up", Outcome: observe.Denied})
	o.OnAcquire(ctx, observe.Acquire{Name: "up", Outcome: observe.Failed, Err: floodgate.ErrUnavailable})
	for range 3 {
		o.OnRelease(ctx, observe.Release{Name: "up", Held: time.Second})
	}
	o.OnRelease(ctx, observe.Release{Name: "up", Held: time.Second, Err: floodgate.ErrUnavailable})
	want := `
# HELP floodgate_inflight_acquires_total Acquisitions of an inflight.Limiter, by outcome (allowed, denied, error).
# TYPE floodgate_inflight_acquires_total counter
floodgate_inflight_acquires_total{limiter="up",outcome="allowed"} 5
floodgate_inflight_acquires_total{limiter="up",outcome="denied"} 1
floodgate_inflight_acquires_total{limiter="up",outcome="error"} 1
# HELP floodgate_inflight_requests Slots of an inflight.Limiter this process holds: its admitted acquisitions minus its releases.
# TYPE floodgate_inflight_requests gauge
floodgate_inflight_requests{limiter="up"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_inflight_acquires_total", "floodgate_inflight_requests"); err != nil {
		t.Error(err)
	}
	if h := histogram(t, m, "floodgate_inflight_hold_seconds"); h.GetSampleCount() != 4 {
		t.Errorf("inflight_hold_seconds count = %d, want 4", h.GetSampleCount())
	}
}

func TestLint(t *testing.T) {
	m := newMetrics(t, nil)
	families(t, m)
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestOptions(t *testing.T) {
	m := newMetrics(t, &fgprom.Options{Namespace: "edge", Buckets: []float64{0.001, 0.01}})
	mfs := families(t, m)
	if _, ok := mfs["edge_decisions_total"]; !ok {
		t.Errorf("Namespace edge: no edge_decisions_total in %v", keys(mfs))
	}
	if n := len(mfs["edge_store_call_duration_seconds"].Metric[0].GetHistogram().Bucket); n != 2 {
		t.Errorf("Buckets of 2 bounds: %d buckets", n)
	}
	if n := len(mfs["edge_inflight_hold_seconds"].Metric[0].GetHistogram().Bucket); n != len(fgprom.DefaultHoldBuckets) {
		t.Errorf("default HoldBuckets: %d buckets, want %d", n, len(fgprom.DefaultHoldBuckets))
	}

	for name, opts := range map[string]*fgprom.Options{
		"namespace with a dash":      {Namespace: "my-app"},
		"namespace with a digit":     {Namespace: "1app"},
		"const label with a dash":    {ConstLabels: prometheus.Labels{"my-label": "x"}},
		"reserved const label":       {ConstLabels: prometheus.Labels{"__name": "x"}},
		"const label of a metric":    {ConstLabels: prometheus.Labels{"limiter": "x"}},
		"decreasing buckets":         {Buckets: []float64{0.01, 0.001}},
		"repeated bucket":            {Buckets: []float64{0.01, 0.01}},
		"hold buckets out of order":  {HoldBuckets: []float64{2, 1}},
		"const label value not utf8": {ConstLabels: prometheus.Labels{"region": "\xff"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := fgprom.New(opts); !errors.Is(err, floodgate.ErrInvalidConfig) {
				t.Errorf("New(%+v) error = %v, want ErrInvalidConfig", opts, err)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRegistersWithOthers(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := newMetrics(t, nil)
	reg.MustRegister(a)
	// A second Metrics of the same names clashes, as two collectors of
	// one metric do; under another namespace it does not.
	if err := reg.Register(newMetrics(t, nil)); err == nil {
		t.Error("a second Metrics of the same namespace registered")
	}
	if err := reg.Register(newMetrics(t, &fgprom.Options{Namespace: "other"})); err != nil {
		t.Errorf("a Metrics of another namespace: %v", err)
	}
}

// TestConcurrentEvents sends events of many label sets from many
// goroutines at once, and decides on limiters of many names: every one
// is counted (go test -race checks the copy-on-write map and the Tally).
func TestConcurrentEvents(t *testing.T) {
	m := newMetrics(t, nil)
	o := m.Observer()
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	limiters := make([]*floodgate.Limiter, len(names))
	for i, name := range names {
		limiters[i] = newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil, name, o)
	}
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			for i := range each {
				j := (g + i) % len(names)
				if _, err := limiters[j].Allow(ctx, "user-1"); err != nil {
					t.Error(err)
					return
				}
				o.OnStoreCall(ctx, observe.StoreCall{Name: "redis", Node: names[j], Decisions: 1, Outcome: observe.CallOK})
			}
		})
	}
	wg.Wait()
	decisions := counterValue(t, m, "floodgate_decisions_total", nil)
	calls := counterValue(t, m, "floodgate_store_calls_total", nil)
	if decisions != goroutines*each || calls != goroutines*each {
		t.Errorf("counted %v decisions and %v calls, want %d of each", decisions, calls, goroutines*each)
	}
	// Each limiter has its takes by outcome, allowed or not.
	if n := testutil.CollectAndCount(m, "floodgate_decisions_total"); n != len(names)*3 {
		t.Errorf("%d series of decisions_total, want %d", n, len(names)*3)
	}
}

// TestDecisionsExactUnderConcurrency decides from 8 goroutines at once on
// one observed limiter, while another scrapes: the counts collected at
// the end are, by outcome, what the callers were told, and no scrape
// ever saw a count go down.
func TestDecisionsExactUnderConcurrency(t *testing.T) {
	const goroutines, each = 8, 5000
	const burst = 15_000 // of 40,000 takes on a stopped clock: the rest are denied
	m := newMetrics(t, nil)
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: burst}, fixed, "api", m.Observer())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)

	stop := make(chan struct{})
	var scraper sync.WaitGroup
	scrapes := 0
	scraper.Go(func() {
		last := map[string]float64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			scrapes++
			mfs, err := reg.Gather()
			if err != nil {
				t.Error(err)
				return
			}
			for _, mf := range mfs {
				for _, mt := range mf.GetMetric() {
					k := mf.GetName()
					for _, lp := range mt.GetLabel() {
						k += "," + lp.GetName() + "=" + lp.GetValue()
					}
					if v := mt.GetCounter().GetValue(); v < last[k] {
						t.Errorf("%s went down from %v to %v", k, last[k], v)
					} else {
						last[k] = v
					}
				}
			}
		}
	})

	// Every 10th call is on a key whose store fails: an error.
	var told [4]atomic.Int64 // by observe.Outcome
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			var mine [4]int64
			for i := range each {
				key := "user-1"
				if i%10 == 9 {
					key = "down"
				}
				d, err := l.AllowN(ctx, key, 1)
				switch {
				case err != nil:
					mine[observe.Failed]++
				case d.Allowed:
					mine[observe.Allowed]++
				default:
					mine[observe.Denied]++
				}
			}
			for o, n := range mine {
				told[o].Add(n)
			}
		})
	}
	wg.Wait()
	close(stop)
	scraper.Wait()
	t.Logf("%d scrapes; told %d allowed, %d denied, %d errors", scrapes,
		told[observe.Allowed].Load(), told[observe.Denied].Load(), told[observe.Failed].Load())

	if got := told[observe.Allowed].Load(); got != burst {
		t.Errorf("callers were told %d admissions, want the burst, %d", got, burst)
	}
	for _, o := range []observe.Outcome{observe.Allowed, observe.Denied, observe.Failed} {
		labels := map[string]string{"limiter": "api", "op": "take", "outcome": o.String()}
		want := float64(told[o].Load())
		if got := counterValue(t, m, "floodgate_decisions_total", labels); got != want {
			t.Errorf("decisions_total%v = %v, callers were told %v", labels, got, want)
		}
		if got := counterValue(t, m, "floodgate_decision_units_total", labels); got != want {
			t.Errorf("decision_units_total%v = %v, want %v", labels, got, want)
		}
	}
}
