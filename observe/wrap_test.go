package observe_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// recorder keeps the events it is given.
type recorder struct {
	mu     sync.Mutex
	events []observe.Decision
}

func (r *recorder) observer() *observe.Observer {
	return &observe.Observer{OnDecision: func(_ context.Context, d observe.Decision) {
		r.mu.Lock()
		r.events = append(r.events, d)
		r.mu.Unlock()
	}, LatencyEvery: 1}
}

func newLimiter(t testing.TB, alg floodgate.Algorithm, now func() time.Time) floodgate.Limiter {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, alg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestWrapReportsEveryCall(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	l := newLimiter(t, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2}, func() time.Time { return now })
	var r recorder
	w, err := observe.Wrap(l, "api", r.observer())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := w.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AllowN(ctx, "k", 1); err != nil { // denied: the bucket is empty
		t.Fatal(err)
	}
	if _, err := w.Reserve(ctx, "k", 1, time.Second); err != nil { // admitted 1s later
		t.Fatal(err)
	}
	if _, err := w.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -1, At: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AllowN(ctx, "", 1); !errors.Is(err, floodgate.ErrEmptyKey) {
		t.Fatalf("AllowN(\"\") error = %v, want ErrEmptyKey", err)
	}
	if _, err := w.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}); err != nil {
		t.Fatal(err)
	}

	type got struct {
		op      floodgate.Op
		check   bool
		n       int64
		outcome observe.Outcome
	}
	want := []got{
		{floodgate.OpTake, false, 1, observe.Allowed},
		{floodgate.OpTake, false, 1, observe.Allowed},
		{floodgate.OpTake, false, 1, observe.Denied},
		{floodgate.OpTake, false, 1, observe.Allowed},
		{floodgate.OpSettle, false, -1, observe.Allowed},
		{floodgate.OpTake, false, 1, observe.Failed},
		{floodgate.OpTake, true, 1, observe.Denied}, // the refund gave back the reserved unit only
	}
	if len(r.events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(r.events), len(want), r.events)
	}
	for i, e := range r.events {
		if g := (got{e.Op, e.Check, e.N, e.Outcome}); g != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, g, want[i])
		}
		if e.Name != "api" {
			t.Errorf("event %d: Name = %q, want api", i, e.Name)
		}
		if e.Latency <= 0 {
			t.Errorf("event %d: Latency = %v with LatencyEvery 1, want > 0", i, e.Latency)
		}
	}
	if r.events[3].Decision.Delay != time.Second {
		t.Errorf("Reserve event: Delay = %v, want 1s", r.events[3].Decision.Delay)
	}
	if !errors.Is(r.events[5].Err, floodgate.ErrEmptyKey) {
		t.Errorf("failed event: Err = %v, want ErrEmptyKey", r.events[5].Err)
	}
	if r.events[0].Key != "k" || r.events[0].Limits != 0 {
		t.Errorf("event 0: Key %q Limits %d, want k and 0", r.events[0].Key, r.events[0].Limits)
	}
}

func TestWrapWait(t *testing.T) {
	l := newLimiter(t, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1}, nil)
	var r recorder
	w, err := observe.Wrap(l, "w", r.observer())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Wait(ctx, "k", 1); !errors.Is(err, floodgate.ErrWaitExceedsDeadline) {
		t.Fatalf("Wait = %v, want ErrWaitExceedsDeadline", err)
	}
	if len(r.events) != 2 {
		t.Fatalf("%d events, want 2", len(r.events))
	}
	for i, want := range []observe.Outcome{observe.Allowed, observe.Denied} {
		e := r.events[i]
		if !e.Wait || e.Outcome != want || e.Latency != 0 {
			t.Errorf("event %d: Wait %v Outcome %v Latency %v, want true %v 0", i, e.Wait, e.Outcome, e.Latency, want)
		}
	}
}

func TestWrapLimitsBinding(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	alg := floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Minute},
	}
	l := newLimiter(t, alg, func() time.Time { return now })
	var r recorder
	w, err := observe.Wrap(l, "plan", r.observer())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := w.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	last := r.events[2]
	if last.Outcome != observe.Denied || last.Limits != 2 || last.Decision.Binding != 1 {
		t.Errorf("third event: Outcome %v Limits %d Binding %d, want denied, 2, 1", last.Outcome, last.Limits, last.Decision.Binding)
	}
}

func TestWrapWithoutObserver(t *testing.T) {
	l := newLimiter(t, floodgate.FixedWindow{Limit: 1, Window: time.Second}, nil)
	for _, o := range []*observe.Observer{nil, {}, {OnBreaker: func(context.Context, observe.BreakerChange) {}}} {
		w, err := observe.Wrap(l, "x", o)
		if err != nil {
			t.Fatal(err)
		}
		if w != l {
			t.Errorf("Wrap(l, x, %+v) wrapped l; want l itself", o)
		}
	}
}

func TestWrapInvalid(t *testing.T) {
	l := newLimiter(t, floodgate.FixedWindow{Limit: 1, Window: time.Second}, nil)
	on := func(context.Context, observe.Decision) {}
	for _, tc := range []struct {
		name string
		l    floodgate.Limiter
		n    string
		o    *observe.Observer
	}{
		{"nil limiter", nil, "x", &observe.Observer{OnDecision: on}},
		{"empty name", l, "", &observe.Observer{OnDecision: on}},
		{"name not UTF-8", l, "api\xff", &observe.Observer{OnDecision: on}},
		{"negative LatencyEvery", l, "x", &observe.Observer{OnDecision: on, LatencyEvery: -1}},
		{"negative FailureInterval", l, "x", &observe.Observer{OnDecision: on, FailureInterval: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := observe.Wrap(tc.l, tc.n, tc.o)
			if !errors.Is(err, floodgate.ErrInvalidConfig) || w != nil {
				t.Errorf("Wrap = %v, %v; want nil and ErrInvalidConfig", w, err)
			}
		})
	}
}

func TestWrapSamplesLatency(t *testing.T) {
	l := newLimiter(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000}, nil)
	var timed, all atomic.Int64
	w, err := observe.Wrap(l, "s", &observe.Observer{OnDecision: func(_ context.Context, d observe.Decision) {
		all.Add(1)
		if d.Latency > 0 {
			timed.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 64_000
	for range n {
		if _, err := w.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	// One in DefaultLatencyEvery (64): 1000 expected, a binomial with
	// standard deviation 31; the bounds are 10 of them away.
	if all.Load() != n || timed.Load() < 690 || timed.Load() > 1310 {
		t.Errorf("%d events, %d timed; want %d and about %d", all.Load(), timed.Load(), n, n/observe.DefaultLatencyEvery)
	}
}

func TestWrapAllocations(t *testing.T) {
	l := newLimiter(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000}, nil)
	var n atomic.Int64
	w, err := observe.Wrap(l, "a", &observe.Observer{OnDecision: func(context.Context, observe.Decision) { n.Add(1) }, LatencyEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if a := testing.AllocsPerRun(1000, func() { _, _ = w.Allow(ctx, "k") }); a != 0 {
		t.Errorf("Allow allocates %v times, want 0", a)
	}
	req := floodgate.Request{Op: floodgate.OpTakeUpTo, N: 3}
	if a := testing.AllocsPerRun(1000, func() { _, _ = w.Apply(ctx, "k", req) }); a != 0 {
		t.Errorf("Apply allocates %v times, want 0", a)
	}
}
