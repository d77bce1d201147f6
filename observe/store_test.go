package observe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// recorder keeps the events it is given, and calls on with each, if set.
type recorder struct {
	mu     sync.Mutex
	events []observe.DecisionEvent
	on     func(context.Context, observe.DecisionEvent)
}

func (r *recorder) observer() *observe.Observer {
	return &observe.Observer{OnDecision: r.record, LatencyEvery: 1}
}

func (r *recorder) record(ctx context.Context, e observe.DecisionEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.on != nil {
		r.on(ctx, e)
	}
}

// errDown is the error of a step on the key "down" of a downStore.
var errDown = fmt.Errorf("%w: test: the node is down", floodgate.ErrUnavailable)

// downStore is a Store whose steps on the key "down" fail with errDown,
// as a remote store's do when its node is unreachable, and whose other
// steps are its inner store's.
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

// newStore returns a memstore whose clock is now (the default when nil),
// under a downStore.
func newStore(t testing.TB, now func() time.Time) floodgate.Store {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return downStore{s}
}

// newObserved returns a limiter of alg named name on a store of newStore
// observed by o.
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

func TestStoreReportsEveryStep(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	var r recorder
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2}, func() time.Time { return now }, "api", r.observer())
	ctx := context.Background()
	if _, err := l.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", 1); err != nil { // denied: the bucket is empty
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, "k", 1, time.Second); err != nil { // admitted 1s later
		t.Fatal(err)
	}
	if _, err := l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -1, At: t0.Add(time.Second)}, nil); err != nil {
		t.Fatal(err)
	}
	// Allow and AllowN hand their arguments to the store, which refuses
	// bad ones: a failed step. Reserve, Wait and Apply refuse them before
	// the store: no step, no event.
	if _, err := l.AllowN(ctx, "", 1); !errors.Is(err, floodgate.ErrEmptyKey) {
		t.Fatalf("AllowN(\"\") error = %v, want ErrEmptyKey", err)
	}
	if _, err := l.Reserve(ctx, "", 1, time.Second); !errors.Is(err, floodgate.ErrEmptyKey) {
		t.Fatalf("Reserve(\"\") error = %v, want ErrEmptyKey", err)
	}
	if _, err := l.Allow(ctx, "down"); !errors.Is(err, errDown) {
		t.Fatalf("Allow(down) error = %v, want %v", err, errDown)
	}
	if _, err := l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 2}, nil); err != nil {
		t.Fatal(err)
	}

	type got struct {
		op      floodgate.Op
		check   bool
		n       int64
		outcome observe.Outcome
		action  observe.Action
		units   uint64
	}
	want := []got{
		{floodgate.OpTake, false, 1, observe.Allowed, observe.ActionTake, 1},
		{floodgate.OpTake, false, 1, observe.Allowed, observe.ActionTake, 1},
		{floodgate.OpTake, false, 1, observe.Denied, observe.ActionTake, 1},
		{floodgate.OpTake, false, 1, observe.Allowed, observe.ActionTake, 1},
		{floodgate.OpSettle, false, -1, observe.Allowed, observe.ActionRefund, 1},
		{floodgate.OpTake, false, 1, observe.Failed, observe.ActionTake, 1},
		{floodgate.OpTake, false, 1, observe.Failed, observe.ActionTake, 1},
		{floodgate.OpTake, true, 1, observe.Denied, observe.ActionCheck, 1}, // the refund gave back the reserved unit only
		{floodgate.OpTakeUpTo, false, 2, observe.Denied, observe.ActionTakeUpTo, 2},
	}
	if len(r.events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(r.events), len(want), r.events)
	}
	for i, e := range r.events {
		if g := (got{e.Op, e.Check, e.N, e.Outcome, e.Action(), e.Units()}); g != want[i] {
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
	if e := r.events[5]; !errors.Is(e.Err, floodgate.ErrEmptyKey) || e.Key != "" {
		t.Errorf("failed event: Err %v Key %q, want ErrEmptyKey and the empty key", e.Err, e.Key)
	}
	if e := r.events[6]; !errors.Is(e.Err, errDown) || e.Key != "down" || e.Decision != (floodgate.Decision{}) {
		t.Errorf("failed event: Err %v Key %q Decision %+v, want %v, down and none", e.Err, e.Key, e.Decision, errDown)
	}
	if r.events[0].Key != "k" || r.events[0].Limits != 0 || r.events[0].Err != nil {
		t.Errorf("event 0: Key %q Limits %d Err %v, want k, 0 and nil", r.events[0].Key, r.events[0].Limits, r.events[0].Err)
	}
	if d := r.events[0].Decision; !d.Allowed || d.Limit != 2 || d.Remaining != 1 {
		t.Errorf("event 0: Decision %+v, want admitted with Limit 2, Remaining 1", d)
	}
}

// TestStoreWait checks that a Wait is reported as the take it makes (an
// admission, possibly with a delay, or a denial when the delay would pass
// its deadline), and a Wait whose context ends during its sleep as that
// take and the refund of its units; in a Tally too.
func TestStoreWait(t *testing.T) {
	var tally observe.Tally
	var r recorder
	// The third Wait's context is cancelled when its take is reported,
	// before it sleeps: it gives its unit back at once.
	third, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	r.on = func(ctx context.Context, e observe.DecisionEvent) {
		if ctx == third && e.Outcome == observe.Allowed && e.Decision.Delay > 0 {
			cancel()
		}
	}
	o := r.observer()
	o.Tally = &tally
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1}, nil, "w", o)
	if err := l.Wait(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancelMinute := context.WithTimeout(context.Background(), time.Minute)
	defer cancelMinute()
	if err := l.Wait(ctx, "k", 1); !errors.Is(err, floodgate.ErrWaitExceedsDeadline) {
		t.Fatalf("Wait within a minute = %v, want ErrWaitExceedsDeadline", err)
	}
	if err := l.Wait(third, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled = %v, want context.Canceled", err)
	}
	want := []struct {
		action  observe.Action
		n       int64
		outcome observe.Outcome
		delayed bool
	}{
		{observe.ActionTake, 1, observe.Allowed, false},
		{observe.ActionTake, 1, observe.Denied, false},
		{observe.ActionTake, 1, observe.Allowed, true},
		{observe.ActionRefund, -1, observe.Allowed, false},
	}
	if len(r.events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(r.events), len(want), r.events)
	}
	for i, w := range want {
		e := r.events[i]
		if e.Action() != w.action || e.N != w.n || e.Outcome != w.outcome || (e.Decision.Delay > 0) != w.delayed {
			t.Errorf("event %d: %v of %d %v with Delay %v; want %v of %d %v, delayed %v", i, e.Action(), e.N, e.Outcome, e.Decision.Delay, w.action, w.n, w.outcome, w.delayed)
		}
		// A Wait's step is its reservation: timed, never its sleep.
		if e.Latency <= 0 || e.Latency >= time.Minute {
			t.Errorf("event %d: Latency %v, want the step's", i, e.Latency)
		}
	}
	if r.events[1].Decision.RetryAfter <= time.Minute {
		t.Errorf("denied Wait: RetryAfter %v, want more than its minute", r.events[1].Decision.RetryAfter)
	}
	c := counts(t, &tally, "w")
	var wantCounts, wantUnits [observe.NumActions][4]uint64
	wantCounts[observe.ActionTake][observe.Allowed], wantUnits[observe.ActionTake][observe.Allowed] = 2, 2
	wantCounts[observe.ActionTake][observe.Denied], wantUnits[observe.ActionTake][observe.Denied] = 1, 1
	wantCounts[observe.ActionRefund][observe.Allowed], wantUnits[observe.ActionRefund][observe.Allowed] = 1, 1
	if c.Decisions != wantCounts || c.Units != wantUnits {
		t.Errorf("Tally: Decisions %v Units %v, want %v and %v", c.Decisions, c.Units, wantCounts, wantUnits)
	}
}

func TestStoreLimitsBinding(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	alg := floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Minute},
	}
	var r recorder
	l := newObserved(t, alg, func() time.Time { return now }, "plan", r.observer())
	for range 3 {
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	// Apply passes each on to the store, which fills it.
	each := make([]floodgate.Decision, 2)
	if _, err := l.Apply(context.Background(), "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, each); err != nil {
		t.Fatal(err)
	}
	if each[0].Limit != 10 || each[1].Limit != 2 || each[1].Allowed {
		t.Errorf("each = %+v, want the token bucket's and the window's denial", each)
	}
	if len(r.events) != 4 {
		t.Fatalf("%d events, want 4", len(r.events))
	}
	last := r.events[2]
	if last.Outcome != observe.Denied || last.Limits != 2 || last.Decision.Binding != 1 {
		t.Errorf("third event: Outcome %v Limits %d Binding %d, want denied, 2, 1", last.Outcome, last.Limits, last.Decision.Binding)
	}
}

func TestStoreWithoutObserver(t *testing.T) {
	s := newStore(t, nil)
	for _, o := range []*observe.Observer{nil, {}, {OnBreaker: func(context.Context, observe.BreakerChange) {}}, {LatencyEvery: 1}} {
		got, err := observe.Store(s, o)
		if err != nil {
			t.Fatal(err)
		}
		if got != s {
			t.Errorf("Store(s, %+v) wrapped s; want s itself", o)
		}
	}
}

func TestStoreInvalid(t *testing.T) {
	on := func(context.Context, observe.DecisionEvent) {}
	s := newStore(t, nil)
	for _, tc := range []struct {
		name string
		s    floodgate.Store
		o    *observe.Observer
	}{
		{"nil store", nil, &observe.Observer{OnDecision: on}},
		{"nil store unobserved", nil, nil},
		{"negative LatencyEvery", s, &observe.Observer{OnDecision: on, LatencyEvery: -1}},
		{"negative FailureInterval", s, &observe.Observer{OnDecision: on, FailureInterval: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := observe.Store(tc.s, tc.o)
			if !errors.Is(err, floodgate.ErrInvalidConfig) || got != nil {
				t.Errorf("Store = %v, %v; want nil and ErrInvalidConfig", got, err)
			}
		})
	}
}

// TestStoreBindRefuses checks that a binding refused, by floodgate.New or
// by the store's Bind, leaves nothing in the Tally: no name is counted
// that no limiter decides under.
func TestStoreBindRefuses(t *testing.T) {
	var tally observe.Tally
	s, err := observe.Store(newStore(t, nil), &observe.Observer{Tally: &tally})
	if err != nil {
		t.Fatal(err)
	}
	ok := floodgate.FixedWindow{Limit: 1, Window: time.Second}
	for _, tc := range []struct {
		name string
		alg  floodgate.Algorithm
	}{
		{"api\xff", ok},
		{"a{b}", ok},
		{"x", floodgate.FixedWindow{Limit: 0, Window: time.Second}},
		{"x", nil},
	} {
		l, err := floodgate.New(s, tc.alg, &floodgate.Options{Name: tc.name})
		if !errors.Is(err, floodgate.ErrInvalidConfig) || l != nil {
			t.Errorf("New(%q, %v) = %v, %v; want nil and ErrInvalidConfig", tc.name, tc.alg, l, err)
		}
	}
	// A store's Bind is called with names that passed CheckName; one that
	// did not never reaches the Tally, whatever the store under it does
	// (a lax store binds any name).
	lax, err := observe.Store(laxStore{newStore(t, nil)}, &observe.Observer{Tally: &tally})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []floodgate.Store{s, lax} {
		for _, name := range []string{"", "api\xff", "a}"} {
			b, err := s.Bind(name, ok)
			if !errors.Is(err, floodgate.ErrInvalidConfig) || b != nil {
				t.Errorf("%T: Bind(%q) = %v, %v; want nil and ErrInvalidConfig", s, name, b, err)
			}
		}
	}
	if cs := tally.Read(); len(cs) != 0 {
		t.Errorf("Read() after refused bindings = %+v, want none", cs)
	}
}

// laxStore is a Store that binds its inner store under one name whatever
// the name it is given.
type laxStore struct{ floodgate.Store }

func (s laxStore) Bind(_ string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	return s.Store.Bind("lax", alg)
}

// closer is a Store with a Close method that counts its calls.
type closer struct {
	floodgate.Store
	closed int
}

func (c *closer) Close() error {
	c.closed++
	return errors.New("closed")
}

func TestStoreClose(t *testing.T) {
	o := &observe.Observer{Tally: new(observe.Tally)}
	inner := &closer{Store: newStore(t, nil)}
	s, err := observe.Store(inner, o)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := s.(io.Closer)
	if !ok {
		t.Fatalf("Store(%T) is a %T without Close", inner, s)
	}
	if err := c.Close(); err == nil || err.Error() != "closed" || inner.closed != 1 {
		t.Errorf("Close = %v, inner closed %d times; want the inner store's error, once", err, inner.closed)
	}
	// A store without Close: closing the observed one does nothing.
	s, err = observe.Store(newStore(t, nil), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.(io.Closer).Close(); err != nil {
		t.Errorf("Close over a store without Close = %v, want nil", err)
	}
}

func TestStoreSamplesLatency(t *testing.T) {
	var timed, all atomic.Int64
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000}, nil, "s", &observe.Observer{OnDecision: func(_ context.Context, d observe.DecisionEvent) {
		all.Add(1)
		if d.Latency > 0 {
			timed.Add(1)
		}
	}})
	const n = 64_000
	for range n {
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	// One in DefaultLatencyEvery (64): 1000 expected, a binomial with
	// standard deviation 31; the bounds are 10 of them away.
	if all.Load() != n || timed.Load() < 690 || timed.Load() > 1310 {
		t.Errorf("%d events, %d timed; want %d and about %d", all.Load(), timed.Load(), n, n/observe.DefaultLatencyEvery)
	}
}

func TestStoreAllocations(t *testing.T) {
	var n atomic.Int64
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000}, nil, "a",
		&observe.Observer{OnDecision: func(context.Context, observe.DecisionEvent) { n.Add(1) }, LatencyEvery: 1})
	ctx := context.Background()
	if a := testing.AllocsPerRun(1000, func() { _, _ = l.Allow(ctx, "k") }); a != 0 {
		t.Errorf("Allow allocates %v times, want 0", a)
	}
	req := floodgate.Request{Op: floodgate.OpTakeUpTo, N: 3}
	if a := testing.AllocsPerRun(1000, func() { _, _ = l.Apply(ctx, "k", req, nil) }); a != 0 {
		t.Errorf("Apply allocates %v times, want 0", a)
	}
	if n.Load() < 2000 {
		t.Errorf("%d events, want one per decision", n.Load())
	}
}

// TestStoreDecidesAsItsStore runs one trace on a limiter over an observed
// store and on one over the store itself, each on a memstore with the same
// clock: the decisions and errors must be the same, and so must those of
// their Bounds for the arguments a Limiter refuses before its store.
func TestStoreDecidesAsItsStore(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	clock := func() time.Time { return now }
	alg := floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 3}
	var tally observe.Tally
	obsStore, err := observe.Store(newStore(t, clock), &observe.Observer{Tally: &tally, OnDecision: func(context.Context, observe.DecisionEvent) {}})
	if err != nil {
		t.Fatal(err)
	}
	plainStore := newStore(t, clock)
	obs, err := floodgate.New(obsStore, alg, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := floodgate.New(plainStore, alg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	long := string(make([]byte, floodgate.MaxKeyLen+1))
	type call struct {
		ctx context.Context
		key string
		n   int64
		dt  time.Duration
	}
	bg := context.Background()
	calls := []call{
		{bg, "k", 1, 0}, {bg, "k", 2, 0}, {bg, "k", 1, 0}, {bg, "k", 1, 300 * time.Millisecond},
		{bg, "k", 3, time.Second}, {bg, "", 1, 0}, {bg, long, 1, 0}, {bg, "k", 0, 0}, {bg, "k", -1, 0},
		{bg, "k", 4, 0}, {cancelled, "k", 1, 0}, {bg, "down", 1, 0}, {bg, "k", 1, 2 * time.Second},
	}
	for i, c := range calls {
		now = now.Add(c.dt)
		for _, step := range []string{"Allow", "AllowN", "Reserve", "Apply"} {
			if step == "Allow" && c.n != 1 {
				continue
			}
			call := func(l *floodgate.Limiter) (floodgate.Decision, error) {
				switch step {
				case "Allow":
					return l.Allow(c.ctx, c.key)
				case "AllowN":
					return l.AllowN(c.ctx, c.key, c.n)
				case "Reserve":
					return l.Reserve(c.ctx, c.key, c.n, 100*time.Millisecond)
				}
				res, err := l.Apply(c.ctx, c.key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: c.n}, nil)
				return res.Decision, err
			}
			// Decide on the plain limiter first, then on the observed one
			// at the same instant: their stores are apart.
			dp, ep := call(plain)
			do, eo := call(obs)
			if dp != do || fmt.Sprint(ep) != fmt.Sprint(eo) {
				t.Errorf("call %d (%s): observed = %+v, %v; unobserved = %+v, %v", i, step, do, eo, dp, ep)
			}
		}
	}
	// The observed Bound hands the store's errors back as they are.
	bo, err := obsStore.Bind("bound", alg)
	if err != nil {
		t.Fatal(err)
	}
	bp, err := plainStore.Bind("bound", alg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key string
		req floodgate.Request
	}{
		{"", floodgate.Request{N: 1}},
		{long, floodgate.Request{N: 1}},
		{"k", floodgate.Request{N: 0}},
		{"k", floodgate.Request{N: 4}},
		{"k", floodgate.Request{Op: floodgate.OpSettle, N: 0}},
		{"k", floodgate.Request{Op: 7, N: 1}},
	} {
		rp, ep := bp.Apply(bg, c.key, c.req, nil)
		ro, eo := bo.Apply(bg, c.key, c.req, nil)
		if rp != ro || fmt.Sprint(ep) != fmt.Sprint(eo) || ep == nil {
			t.Errorf("Apply(%.8q, %+v): observed = %+v, %v; unobserved = %+v, %v; want the same error", c.key, c.req, ro, eo, rp, ep)
		}
		dp, ep := bp.Take(bg, c.key, c.req.N)
		do, eo := bo.Take(bg, c.key, c.req.N)
		if dp != do || fmt.Sprint(ep) != fmt.Sprint(eo) {
			t.Errorf("Take(%.8q, %d): observed = %+v, %v; unobserved = %+v, %v", c.key, c.req.N, do, eo, dp, ep)
		}
	}
}
