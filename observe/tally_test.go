package observe_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// counts returns the Counts of name in t, failing when there are none.
func counts(t *testing.T, tally *observe.Tally, name string) observe.Counts {
	t.Helper()
	for _, c := range tally.Read() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("Read() has no counts of %q", name)
	return observe.Counts{}
}

func TestTallyCountsEveryAction(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return t0 }
	var tally observe.Tally
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 5}
	s, err := observe.Store(newStore(t, now), &observe.Observer{Tally: &tally})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, alg, &floodgate.Options{Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Allow(ctx, "k"))                                                                  // take allowed 1
	must(l.AllowN(ctx, "k", 3))                                                              // take allowed 3
	must(l.AllowN(ctx, "k", 2))                                                              // take denied 2 (1 left)
	must(l.Reserve(ctx, "k", 1, 0))                                                          // take allowed 1
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: 2, At: t0}, nil))    // settle 2
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -3, At: t0}, nil))   // refund 3
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 4}, nil))          // take_up_to
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil)) // check
	if err := l.Wait(ctx, "k2", 1); err != nil {                                             // take allowed 1
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "down"); !errors.Is(err, errDown) { // take error, 1 unit
		t.Fatalf("Allow(down) = %v, want %v", err, errDown)
	}
	// AllowN hands its arguments to the store, which refuses bad ones: a
	// failed take of 0 units. Reserve refuses them before the store:
	// nothing counted.
	if _, err := l.AllowN(ctx, "k", 0); !errors.Is(err, floodgate.ErrInvalidN) { // take error, 0 units
		t.Fatalf("AllowN(0) = %v, want ErrInvalidN", err)
	}
	if _, err := l.Reserve(ctx, "k", 0, 0); !errors.Is(err, floodgate.ErrInvalidN) {
		t.Fatalf("Reserve(0) = %v, want ErrInvalidN", err)
	}
	// A Bound of the store under the same name counts into the same
	// counters, and the store's refusals of its arguments are failures.
	b, err := s.Bind("api", alg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Take(ctx, "", 1); !errors.Is(err, floodgate.ErrEmptyKey) { // take error, 1 unit
		t.Fatalf("Take(\"\") = %v, want ErrEmptyKey", err)
	}
	if _, err := b.Apply(ctx, "k", floodgate.Request{N: 0}, nil); !errors.Is(err, floodgate.ErrInvalidN) { // take error, 0 units
		t.Fatalf("Apply(N: 0) = %v, want ErrInvalidN", err)
	}

	c := counts(t, &tally, "api")
	type cell struct {
		a                observe.Action
		o                observe.Outcome
		decisions, units uint64
	}
	want := []cell{
		{observe.ActionTake, observe.Allowed, 4, 6},
		{observe.ActionTake, observe.Denied, 1, 2},
		{observe.ActionTake, observe.Failed, 4, 2},
		{observe.ActionSettle, observe.Allowed, 1, 2},
		{observe.ActionRefund, observe.Allowed, 1, 3},
	}
	// The take_up_to and the check depend on what the settlements left:
	// read their outcomes rather than assume them.
	var upTo, check cell
	for o := observe.Allowed; o <= observe.Failed; o++ {
		if c.Decisions[observe.ActionTakeUpTo][o] > 0 {
			upTo = cell{observe.ActionTakeUpTo, o, 1, 4}
		}
		if c.Decisions[observe.ActionCheck][o] > 0 {
			check = cell{observe.ActionCheck, o, 1, 1}
		}
	}
	if upTo.decisions == 0 || check.decisions == 0 {
		t.Fatalf("no take_up_to or check counted: %+v", c)
	}
	want = append(want, upTo, check)
	var got [observe.NumActions][4]uint64
	for _, w := range want {
		got[w.a][w.o] = w.decisions
		if c.Decisions[w.a][w.o] != w.decisions || c.Units[w.a][w.o] != w.units {
			t.Errorf("Counts[%v][%v]: %d decisions, %d units; want %d, %d", w.a, w.o, c.Decisions[w.a][w.o], c.Units[w.a][w.o], w.decisions, w.units)
		}
	}
	if got != c.Decisions {
		t.Errorf("Decisions = %v, want %v", c.Decisions, got)
	}
	if c.Limits != 0 || len(c.Binding) != 0 {
		t.Errorf("Limits %d Binding %v, want 0 and none for a single algorithm", c.Limits, c.Binding)
	}
}

func TestTallyBinding(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	alg := floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Minute},
	}
	var tally observe.Tally
	l := newObserved(t, alg, func() time.Time { return now }, "plan", &observe.Observer{Tally: &tally})
	ctx := context.Background()
	for range 3 {
		if _, err := l.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	// A Wait is a take: its binding limit is counted (the window denies
	// it, whose next window is beyond the deadline).
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Wait(wctx, "k", 1); !errors.Is(err, floodgate.ErrWaitExceedsDeadline) {
		t.Fatalf("Wait = %v, want ErrWaitExceedsDeadline", err)
	}
	// Neither checks nor failures have a binding limit.
	if _, err := l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, "down"); !errors.Is(err, errDown) {
		t.Fatalf("Allow(down) = %v, want %v", err, errDown)
	}
	c := counts(t, &tally, "plan")
	// The window has fewer left after each admission (1, then 0) and
	// denies the third take and the Wait.
	want := [][4]uint64{{}, {}}
	want[1][observe.Allowed] = 2
	want[1][observe.Denied] = 2
	if c.Limits != 2 || len(c.Binding) != 2 || c.Binding[0] != want[0] || c.Binding[1] != want[1] {
		t.Errorf("Limits %d Binding %v, want 2 and %v", c.Limits, c.Binding, want)
	}
}

// TestTallyConcurrent counts the decisions of many goroutines on limiters
// over two observed stores sharing a Tally, three of them under one name,
// while Read runs: every count Read returns only grows, and the last
// equals what the callers were told.
func TestTallyConcurrent(t *testing.T) {
	var tally observe.Tally
	obs := &observe.Observer{Tally: &tally}
	alg := floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 50}
	mem, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	store := func() floodgate.Store {
		s, err := observe.Store(downStore{mem}, obs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1, s2 := store(), store()
	newLim := func(s floodgate.Store, name string) *floodgate.Limiter {
		l, err := floodgate.New(s, alg, &floodgate.Options{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	limiters := []*floodgate.Limiter{newLim(s1, "a"), newLim(s1, "a"), newLim(s2, "a"), newLim(s2, "b")}
	const b = 3 // limiters[b] is named b

	const goroutines, each = 16, 5000
	var told [2][4]atomic.Uint64 // [a or b][outcome]
	var units [2]atomic.Uint64
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		var last [2][observe.NumActions][4]uint64
		var lastUnits [2][observe.NumActions][4]uint64
		for {
			select {
			case <-stop:
				readErr <- nil
				return
			default:
			}
			for _, c := range tally.Read() {
				i := 0
				if c.Name == "b" {
					i = 1
				}
				for a := range observe.NumActions {
					for o := range 4 {
						if c.Decisions[a][o] < last[i][a][o] || c.Units[a][o] < lastUnits[i][a][o] {
							readErr <- fmt.Errorf("%s: Read counted %d %v %v decisions of %d units after %d of %d",
								c.Name, c.Decisions[a][o], observe.Action(a), observe.Outcome(o), c.Units[a][o], last[i][a][o], lastUnits[i][a][o])
							return
						}
					}
				}
				last[i], lastUnits[i] = c.Decisions, c.Units
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range each {
				li := (g + i) % len(limiters)
				n := int64(1 + i%3)
				key := fmt.Sprint("k", i%7)
				if i%101 == 0 {
					key = "down"
				}
				d, err := limiters[li].AllowN(ctx, key, n)
				o := observe.Denied
				switch {
				case err != nil:
					o = observe.Failed
				case d.Allowed:
					o = observe.Allowed
				}
				name := 0
				if li == b {
					name = 1
				}
				told[name][o].Add(1)
				units[name].Add(uint64(n))
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	cs := tally.Read()
	if len(cs) != 2 || cs[0].Name != "a" || cs[1].Name != "b" {
		t.Fatalf("Read() names %v, want a then b", cs)
	}
	var total uint64
	for i, c := range cs {
		var sum uint64
		for o := observe.Allowed; o <= observe.Failed; o++ {
			if got, want := c.Decisions[observe.ActionTake][o], told[i][o].Load(); got != want {
				t.Errorf("%s: %d %v takes counted, callers were told %d", c.Name, got, o, want)
			}
			sum += c.Units[observe.ActionTake][o]
			total += c.Decisions[observe.ActionTake][o]
		}
		if sum != units[i].Load() {
			t.Errorf("%s: %d units counted, %d asked for", c.Name, sum, units[i].Load())
		}
		if c.Decisions[observe.ActionTake][observe.Failed] == 0 {
			t.Errorf("%s: no failed takes counted", c.Name)
		}
	}
	if total != goroutines*each {
		t.Errorf("%d takes counted, want %d", total, goroutines*each)
	}
}

func TestTallyTimed(t *testing.T) {
	for _, every := range []int{0, 1, 16} {
		t.Run(fmt.Sprint(every), func(t *testing.T) {
			var tally observe.Tally
			var timed, bad atomic.Int64
			o := &observe.Observer{Tally: &tally, LatencyEvery: every, OnTimed: func(_ context.Context, d observe.DecisionEvent) {
				timed.Add(1)
				if d.Latency <= 0 || d.Name != "t" {
					bad.Add(1)
				}
			}}
			l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000}, nil, "t", o)
			const n = 64_000
			for range n {
				if _, err := l.Allow(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
			}
			// A stripe's counter values are consecutive, and their hashes
			// below 2^32/every are one in every of them within a few:
			// the bounds leave 10%, not a binomial's spread.
			per := every
			if per == 0 {
				per = observe.DefaultLatencyEvery
			}
			want := int64(n / per)
			if got := timed.Load(); got < want*9/10 || got > want*11/10 {
				t.Errorf("LatencyEvery %d: %d of %d decisions timed, want about %d", every, got, n, want)
			}
			if bad.Load() != 0 {
				t.Errorf("%d timed events without a Latency or the name", bad.Load())
			}
			if c := counts(t, &tally, "t"); c.Decisions[observe.ActionTake][observe.Allowed] != n {
				t.Errorf("%d admitted takes counted, want %d", c.Decisions[observe.ActionTake][observe.Allowed], n)
			}
		})
	}
}

// TestTallyAllocations checks that an observed decision allocates nothing
// with a Tally and an OnTimed that receives every decision, on the
// costliest shape: a Limits, whose binding limit is counted too.
func TestTallyAllocations(t *testing.T) {
	var tally observe.Tally
	var n atomic.Int64
	o := &observe.Observer{Tally: &tally, LatencyEvery: 1, OnTimed: func(context.Context, observe.DecisionEvent) { n.Add(1) }}
	alg := floodgate.Limits{
		floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000},
		floodgate.FixedWindow{Limit: 1 << 40, Window: time.Second},
	}
	l := newObserved(t, alg, nil, "a", o)
	ctx := context.Background()
	each := make([]floodgate.Decision, 2)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Allow", func() { _, _ = l.Allow(ctx, "k") }},
		{"AllowN", func() { _, _ = l.AllowN(ctx, "k", 2) }},
		{"Reserve", func() { _, _ = l.Reserve(ctx, "k", 1, time.Second) }},
		{"Wait", func() { _ = l.Wait(ctx, "k", 1) }},
		{"Apply", func() { _, _ = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 3}, each) }},
	} {
		before := n.Load()
		if a := testing.AllocsPerRun(1000, tc.f); a != 0 {
			t.Errorf("%s allocates %v times with a Tally, want 0", tc.name, a)
		}
		if n.Load()-before < 1000 {
			t.Errorf("%s: %d decisions timed of 1001, want all (LatencyEvery 1)", tc.name, n.Load()-before)
		}
	}
	// Without OnTimed, and timing one decision in the default 64.
	l = newObserved(t, alg, nil, "b", &observe.Observer{Tally: &tally})
	if a := testing.AllocsPerRun(1000, func() { _, _ = l.Allow(ctx, "k") }); a != 0 {
		t.Errorf("Allow allocates %v times with a Tally only, want 0", a)
	}
	l = newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000}, nil, "c",
		&observe.Observer{Tally: &tally, OnTimed: func(context.Context, observe.DecisionEvent) { n.Add(1) }})
	if a := testing.AllocsPerRun(1000, func() { _, _ = l.Allow(ctx, "k") }); a != 0 {
		t.Errorf("Allow allocates %v times with a Tally and OnTimed, want 0", a)
	}
}

func TestTallyEmpty(t *testing.T) {
	var tally observe.Tally
	if cs := tally.Read(); len(cs) != 0 {
		t.Errorf("Read() of an empty Tally = %v, want none", cs)
	}
}

// TestTallySharesNames checks that limiters built again under a name
// count into that name's counters instead of adding some.
func TestTallySharesNames(t *testing.T) {
	var tally observe.Tally
	o := &observe.Observer{Tally: &tally}
	for range 100 {
		l := newObserved(t, floodgate.FixedWindow{Limit: 10, Window: time.Second}, nil, "r", o)
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	cs := tally.Read()
	if len(cs) != 1 || cs[0].Decisions[observe.ActionTake][observe.Allowed] != 100 {
		t.Errorf("Read() = %+v, want one name with 100 admitted takes", cs)
	}
}

// TestTallyDerivedNames checks that a limiter built without a Name is
// counted under the name derived from its configuration, as
// floodgate.Limiter.Name reports it.
func TestTallyDerivedNames(t *testing.T) {
	var tally observe.Tally
	s, err := observe.Store(newStore(t, nil), &observe.Observer{Tally: &tally})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if c := counts(t, &tally, l.Name()); c.Decisions[observe.ActionTake][observe.Allowed] != 1 {
		t.Errorf("%s: %v, want one admitted take", l.Name(), c.Decisions)
	}
}
