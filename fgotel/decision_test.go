package fgotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Attribute names, as the wanted points spell them.
const (
	limiter  = "floodgate.limiter.name"
	result   = "floodgate.rate_limiting.result"
	op       = "floodgate.rate_limiting.op"
	check    = "floodgate.rate_limiting.check"
	binding  = "floodgate.rate_limiting.binding"
	errType  = "error.type"
	storeKey = "floodgate.store.name"
)

// series returns the attributes of a decision instrument's point.
func series(name, res, step string, kv ...string) string {
	return attrs(append([]string{limiter, name, result, res, op, step}, kv...)...)
}

// TestDecisionCounts drives limiters on memstore wrapped by observe.Store
// through every kind of step, timing every decision, and checks what the
// instruments say against what the limiters answered.
func TestDecisionCounts(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	o.LatencyEvery = 1
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	api := observed(t, "api", floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 2}, clock, o)
	plan := observed(t, "plan", floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Minute},
	}, clock, o)
	shaper := observed(t, "shaper", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, clock, o)
	ctx := context.Background()
	driveDecisions(t, ctx, api, plan, shaper, t0)
	got := collect(t, r)

	requests := mustGet(t, got, "floodgate.rate_limiting.requests", "counter", "{request}")
	equal(t, "requests", values(requests), map[string]int64{
		series("api", "allowed", "take"):               4, // Allow ×2, AllowN, Wait
		series("api", "denied", "take"):                2, // Allow, Wait past its deadline
		series("api", "error", "take"):                 5, // empty key, exceeds the limit, n = 0, the store down ×2
		series("api", "denied", "take", check, "true"): 1,
		series("api", "allowed", "settle"):             2, // a charge and a refund
		series("api", "allowed", "take_up_to"):         1,
		series("plan", "allowed", "take"):              3, // Allow ×2, Wait
		// The Allow, the Wait and the take_up_to the fixed window
		// denied: the Tally counts them by binding limit.
		series("plan", "denied", "take", binding, "1"):  3,
		series("plan", "denied", "take", check, "true"): 1,
		series("shaper", "allowed", "take"):             2, // Allow, Reserve
	})
	units := mustGet(t, got, "floodgate.rate_limiting.units", "counter", "{unit}")
	equal(t, "units", values(units), map[string]int64{
		series("api", "allowed", "take"):                5,
		series("api", "denied", "take"):                 2,
		series("api", "error", "take"):                  7, // 1, 3, 0, 1 and 2 units
		series("api", "denied", "take", check, "true"):  1,
		series("api", "allowed", "take_up_to"):          5,
		series("plan", "allowed", "take"):               3,
		series("plan", "denied", "take"):                2, // units have no binding
		series("plan", "denied", "take_up_to"):          1,
		series("plan", "denied", "take", check, "true"): 1,
		series("shaper", "allowed", "take"):             2,
	})

	// Every decision was timed (LatencyEvery 1), a Wait's reservation
	// too: the histogram counts them under their whole label tuple,
	// error.type and the binding of a composite's every denial included.
	dur := mustGet(t, got, "floodgate.rate_limiting.decision.duration", "histogram", "s")
	equal(t, "decision.duration count", counts(dur), map[string]uint64{
		series("api", "allowed", "take"):                              4,
		series("api", "denied", "take"):                               2,
		series("api", "error", "take", errType, "empty_key"):          1,
		series("api", "error", "take", errType, "exceeds_limit"):      1,
		series("api", "error", "take", errType, "invalid_n"):          1,
		series("api", "error", "take", errType, "unavailable"):        2,
		series("api", "denied", "take", check, "true"):                1,
		series("api", "allowed", "settle"):                            2,
		series("api", "allowed", "take_up_to"):                        1,
		series("plan", "allowed", "take"):                             3,
		series("plan", "denied", "take", binding, "1"):                2,
		series("plan", "denied", "take_up_to", binding, "1"):          1,
		series("plan", "denied", "take", check, "true", binding, "1"): 1,
		series("shaper", "allowed", "take"):                           2,
	})
	if p := dur.points[series("api", "allowed", "take")]; len(p.bounds) == 0 || p.bounds[0] != 10e-6 || p.bounds[len(p.bounds)-1] != 0.1 {
		t.Errorf("decision.duration bounds = %v, want 10µs to 100ms", p.bounds)
	}
	queue := mustGet(t, got, "floodgate.rate_limiting.request.time_in_queue", "histogram", "s")
	equal(t, "time_in_queue count", counts(queue), map[string]uint64{series("shaper", "allowed", "take"): 1})
	if p := queue.points[series("shaper", "allowed", "take")]; p.sum != 1 {
		t.Errorf("time_in_queue sum = %v, want 1 (the reservation's delay)", p.sum)
	}
}

// driveDecisions makes the decisions TestDecisionCounts counts, on
// limiters whose clock stays at t0, and checks what each answered.
func driveDecisions(t *testing.T, ctx context.Context, api, plan, shaper *floodgate.Limiter, t0 time.Time) {
	t.Helper()
	want := func(what string, d floodgate.Decision, err error, allowed bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d.Allowed != allowed {
			t.Fatalf("%s: Allowed = %v, want %v", what, d.Allowed, allowed)
		}
	}
	wantErr := func(what string, err, target error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Fatalf("%s: error %v, want %v", what, err, target)
		}
	}
	apply := func(l *floodgate.Limiter, key string, req floodgate.Request) (floodgate.Decision, error) {
		res, err := l.Apply(ctx, key, req, nil)
		return res.Decision, err
	}

	d, err := api.Allow(ctx, "alice")
	want("Allow(alice) 1", d, err, true)
	d, err = api.Allow(ctx, "alice")
	want("Allow(alice) 2", d, err, true)
	d, err = api.Allow(ctx, "alice")
	want("Allow(alice) 3", d, err, false)
	d, err = api.AllowN(ctx, "bob", 2)
	want("AllowN(bob, 2)", d, err, true)
	// AllowN hands its arguments to the store, which refuses these:
	// counted, with their error types. Reserve refuses them before the
	// store: not counted.
	_, err = api.Reserve(ctx, "", 1, time.Second)
	wantErr(`Reserve("", 1)`, err, floodgate.ErrEmptyKey)
	_, err = api.AllowN(ctx, "", 1)
	wantErr(`AllowN("", 1)`, err, floodgate.ErrEmptyKey)
	_, err = api.AllowN(ctx, "carol", 3)
	wantErr("AllowN(carol, 3)", err, floodgate.ErrExceedsLimit)
	_, err = api.AllowN(ctx, "dave", 0)
	wantErr("AllowN(dave, 0)", err, floodgate.ErrInvalidN)
	// The store fails: counted with the error.
	_, err = api.Allow(ctx, "down")
	wantErr("Allow(down)", err, floodgate.ErrUnavailable)
	_, err = api.AllowN(ctx, "down", 2)
	wantErr("AllowN(down, 2)", err, floodgate.ErrUnavailable)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	wantErr("Wait(alice) an hour away", api.Wait(wctx, "alice", 1), floodgate.ErrWaitExceedsDeadline)
	if err := api.Wait(wctx, "erin", 1); err != nil {
		t.Fatalf("Wait(erin): %v", err)
	}
	d, err = apply(api, "alice", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true})
	want("check(alice)", d, err, false)
	d, err = apply(api, "frank", floodgate.Request{Op: floodgate.OpSettle, N: 1, At: t0})
	want("charge(frank)", d, err, true)
	d, err = apply(api, "frank", floodgate.Request{Op: floodgate.OpSettle, N: -1, At: t0})
	want("refund(frank)", d, err, true)
	d, err = apply(api, "gina", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 5})
	want("take_up_to(gina, 5)", d, err, true)

	for range 2 {
		d, err = plan.Allow(ctx, "dave")
		want("plan.Allow(dave)", d, err, true)
	}
	d, err = plan.Allow(ctx, "dave") // the fixed window (limit 2) denies
	want("plan.Allow(dave) 3", d, err, false)
	if d.Binding != 1 {
		t.Fatalf("plan's denial bound on limit %d, want 1", d.Binding)
	}
	// A Wait is a take: the fixed window, 40 seconds from its next
	// window, denies it, and binds.
	short, cancelShort := context.WithTimeout(ctx, 10*time.Second)
	defer cancelShort()
	wantErr("plan.Wait(dave) 40s away", plan.Wait(short, "dave", 1), floodgate.ErrWaitExceedsDeadline)
	if err := plan.Wait(short, "erin", 1); err != nil {
		t.Fatalf("plan.Wait(erin): %v", err)
	}
	d, err = apply(plan, "dave", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true})
	want("plan check(dave)", d, err, false)
	d, err = apply(plan, "dave", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 1})
	want("plan take_up_to(dave)", d, err, false)

	d, err = shaper.Allow(ctx, "erin")
	want("shaper.Allow(erin)", d, err, true)
	d, err = shaper.Reserve(ctx, "erin", 1, 2*time.Second)
	want("shaper.Reserve(erin)", d, err, true)
	if d.Delay != time.Second {
		t.Fatalf("shaper.Reserve(erin): Delay %v, want 1s", d.Delay)
	}
}

// TestDecisionDurationIsASample checks that with the default LatencyEvery
// the requests counter counts every decision and the duration histogram
// a sample of them.
func TestDecisionDurationIsASample(t *testing.T) {
	m, r := newMetrics(t, nil)
	l := observed(t, "api", floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil, m.Observer())
	ctx := context.Background()
	const decisions = 64 * 100
	for range decisions {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, r)
	allowed := series("api", "allowed", "take")
	equal(t, "requests", values(got["floodgate.rate_limiting.requests"]), map[string]int64{allowed: decisions})
	// One in 64 is timed, give or take the counts of the other stripes a
	// goroutine may have moved to.
	if n := counts(got["floodgate.rate_limiting.decision.duration"])[allowed]; n == 0 || n > decisions/16 {
		t.Errorf("decision.duration counts %d of %d decisions, want about %d", n, decisions, decisions/64)
	}
}

// TestMetricsShareOneTally checks that two Observers of one Metrics
// count into one Tally, and that two Metrics on one MeterProvider add
// up.
func TestMetricsShareOneTally(t *testing.T) {
	m, r := newMetrics(t, nil)
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}
	a := observed(t, "api", alg, nil, m.Observer())
	b := observed(t, "api", alg, nil, m.Observer())
	ctx := context.Background()
	for range 3 {
		_, _ = a.Allow(ctx, "k")
	}
	_, _ = b.Allow(ctx, "k")
	equal(t, "requests", values(collect(t, r)["floodgate.rate_limiting.requests"]), map[string]int64{
		series("api", "allowed", "take"): 4,
	})
}

// TestUnboundDenials checks a composite and a single algorithm observed
// under one name: the composite's denials are counted by binding limit,
// the other's without one.
func TestUnboundDenials(t *testing.T) {
	m, r := newMetrics(t, nil)
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	o := m.Observer()
	plan := observed(t, "api", floodgate.Limits{
		floodgate.FixedWindow{Limit: 1, Window: time.Minute},
		floodgate.FixedWindow{Limit: 5, Window: time.Hour},
	}, clock, o)
	free := observed(t, "api", floodgate.FixedWindow{Limit: 1, Window: time.Minute}, clock, o)
	ctx := context.Background()
	for _, l := range []*floodgate.Limiter{plan, plan, plan, free, free} {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{
		series("api", "allowed", "take"):              2,
		series("api", "denied", "take", binding, "0"): 2,
		series("api", "denied", "take"):               1,
	}
	for i := range 2 { // the second collection must not count them again
		equal(t, "requests "+strings.Repeat("again ", i), values(collect(t, r)["floodgate.rate_limiting.requests"]), want)
	}
}
