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

// newObserved returns observe.New of alg on a memstore whose clock is now.
func newObserved(t testing.TB, alg floodgate.Algorithm, now func() time.Time, name string, o *observe.Observer) floodgate.Limiter {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	l, err := observe.New(s, alg, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

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

func TestTallyCountsEveryKind(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return t0 }
	var tally observe.Tally
	l := newObserved(t, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 5}, now, "api", &observe.Observer{Tally: &tally})
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Allow(ctx, "k"))                                                             // take allowed 1
	must(l.AllowN(ctx, "k", 3))                                                         // take allowed 3
	must(l.AllowN(ctx, "k", 2))                                                         // take denied 2 (1 left)
	must(l.Reserve(ctx, "k", 1, 0))                                                     // take allowed 1
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: 2, At: t0}))    // settle 2
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -3, At: t0}))   // refund 3
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 4}))          // take_up_to
	must(l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true})) // check
	if _, err := l.Allow(ctx, ""); !errors.Is(err, floodgate.ErrEmptyKey) {             // take error, 1 unit
		t.Fatalf("Allow(\"\") = %v, want ErrEmptyKey", err)
	}
	if _, err := l.AllowN(ctx, "k", 0); !errors.Is(err, floodgate.ErrInvalidN) { // take error, 0 units
		t.Fatalf("AllowN(0) = %v, want ErrInvalidN", err)
	}
	if err := l.Wait(ctx, "k2", 1); err != nil { // wait allowed
		t.Fatal(err)
	}

	c := counts(t, &tally, "api")
	type cell struct {
		k                observe.Kind
		o                observe.Outcome
		decisions, units uint64
	}
	want := []cell{
		{observe.KindTake, observe.Allowed, 3, 5},
		{observe.KindTake, observe.Denied, 1, 2},
		{observe.KindTake, observe.Failed, 2, 1},
		{observe.KindSettle, observe.Allowed, 1, 2},
		{observe.KindRefund, observe.Allowed, 1, 3},
		{observe.KindWait, observe.Allowed, 1, 1},
	}
	// The take_up_to and the check depend on what the settlements left:
	// read their outcomes rather than assume them.
	var upTo, check cell
	for o := observe.Allowed; o <= observe.Failed; o++ {
		if c.Decisions[observe.KindTakeUpTo][o] > 0 {
			upTo = cell{observe.KindTakeUpTo, o, 1, 4}
		}
		if c.Decisions[observe.KindCheck][o] > 0 {
			check = cell{observe.KindCheck, o, 1, 1}
		}
	}
	if upTo.decisions == 0 || check.decisions == 0 {
		t.Fatalf("no take_up_to or check counted: %+v", c)
	}
	want = append(want, upTo, check)
	var got [observe.NumKinds][4]uint64
	for _, w := range want {
		got[w.k][w.o] = w.decisions
		if c.Decisions[w.k][w.o] != w.decisions || c.Units[w.k][w.o] != w.units {
			t.Errorf("Counts[%v][%v]: %d decisions, %d units; want %d, %d", w.k, w.o, c.Decisions[w.k][w.o], c.Units[w.k][w.o], w.decisions, w.units)
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
	for range 3 {
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	c := counts(t, &tally, "plan")
	// The window has fewer left after each admission (1, then 0) and
	// denies the third.
	want := [][4]uint64{{}, {0, 0, 1, 0}}
	want[1][observe.Allowed] = 2
	if c.Limits != 2 || len(c.Binding) != 2 || c.Binding[0] != want[0] || c.Binding[1] != want[1] {
		t.Errorf("Limits %d Binding %v, want 2 and %v", c.Limits, c.Binding, want)
	}
}

// TestTallyConcurrent counts the decisions of many goroutines on limiters
// of New and Wrap, two of them under one name, while Read runs: every
// count Read returns only grows, and the last equals what the callers
// were told.
func TestTallyConcurrent(t *testing.T) {
	var tally observe.Tally
	obs := &observe.Observer{Tally: &tally}
	alg := floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 50}
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	a1, err := observe.New(store, alg, "a", obs)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := floodgate.New(store, alg)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := observe.Wrap(plain, "a", obs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := observe.New(store, alg, "b", obs)
	if err != nil {
		t.Fatal(err)
	}
	limiters := []floodgate.Limiter{a1, a2, b}

	const goroutines, each = 16, 5000
	var told [2][4]atomic.Uint64 // [a or b][outcome]
	var units [2]atomic.Uint64
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		var last [2]uint64
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
				var n uint64
				for o := range 4 {
					n += c.Decisions[observe.KindTake][o]
				}
				if n < last[i] {
					readErr <- fmt.Errorf("%s: Read counted %d takes after %d", c.Name, n, last[i])
					return
				}
				last[i] = n
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
				d, err := limiters[li].AllowN(ctx, fmt.Sprint("k", i%7), n)
				o := observe.Denied
				switch {
				case err != nil:
					o = observe.Failed
				case d.Allowed:
					o = observe.Allowed
				}
				name := 0 // a1 and a2 are a, limiters[2] is b
				if li == 2 {
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
	for i, c := range cs {
		var sum uint64
		for o := observe.Allowed; o <= observe.Failed; o++ {
			if got, want := c.Decisions[observe.KindTake][o], told[i][o].Load(); got != want {
				t.Errorf("%s: %d %v takes counted, callers were told %d", c.Name, got, o, want)
			}
			sum += c.Units[observe.KindTake][o]
		}
		if sum != units[i].Load() {
			t.Errorf("%s: %d units counted, %d asked for", c.Name, sum, units[i].Load())
		}
	}
	if total := cs[0].Decisions[observe.KindTake][observe.Allowed] + cs[0].Decisions[observe.KindTake][observe.Denied] +
		cs[1].Decisions[observe.KindTake][observe.Allowed] + cs[1].Decisions[observe.KindTake][observe.Denied]; total != goroutines*each {
		t.Errorf("%d takes counted, want %d", total, goroutines*each)
	}
}

func TestTallyTimed(t *testing.T) {
	for _, every := range []int{0, 1, 16} {
		t.Run(fmt.Sprint(every), func(t *testing.T) {
			var tally observe.Tally
			var timed, bad atomic.Int64
			o := &observe.Observer{Tally: &tally, LatencyEvery: every, OnTimed: func(_ context.Context, d observe.Decision) {
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
		})
	}
}

// TestNewDecidesAsFloodgateNew runs one trace on observe.New and on
// floodgate.New, each on a memstore with the same clock: the decisions
// and errors must be the same, including the arguments New's fast path
// hands back to floodgate.New's Limiter.
func TestNewDecidesAsFloodgateNew(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	clock := func() time.Time { return now }
	alg := floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 3}
	var tally observe.Tally
	obs := newObserved(t, alg, clock, "x", &observe.Observer{Tally: &tally, OnDecision: func(context.Context, observe.Decision) {}})
	plain := newLimiter(t, alg, clock)
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
		{bg, "k", 4, 0}, {cancelled, "k", 1, 0}, {bg, "k", 1, 2 * time.Second},
	}
	for i, c := range calls {
		now = now.Add(c.dt)
		for _, allowN := range []bool{false, true} {
			if !allowN && c.n != 1 {
				continue
			}
			call := func(l floodgate.Limiter) (floodgate.Decision, error) {
				if allowN {
					return l.AllowN(c.ctx, c.key, c.n)
				}
				return l.Allow(c.ctx, c.key)
			}
			// Decide on the plain limiter first, then on the observed one
			// at the same instant: their stores are apart.
			dp, ep := call(plain)
			do, eo := call(obs)
			if dp != do || fmt.Sprint(ep) != fmt.Sprint(eo) {
				t.Errorf("call %d (AllowN %v): observed = %+v, %v; floodgate.New = %+v, %v", i, allowN, do, eo, dp, ep)
			}
		}
	}
}

func TestNewInvalid(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := floodgate.FixedWindow{Limit: 1, Window: time.Second}
	o := &observe.Observer{Tally: new(observe.Tally)}
	for _, tc := range []struct {
		name  string
		store floodgate.Store
		alg   floodgate.Algorithm
		n     string
		o     *observe.Observer
	}{
		{"nil store", nil, ok, "x", o},
		{"invalid algorithm", s, floodgate.FixedWindow{Limit: 0, Window: time.Second}, "x", o},
		{"nil algorithm", s, nil, "x", o},
		{"empty name", s, ok, "", o},
		{"name not UTF-8", s, ok, "\xc3(", o},
		{"negative LatencyEvery", s, ok, "x", &observe.Observer{Tally: new(observe.Tally), LatencyEvery: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := observe.New(tc.store, tc.alg, tc.n, tc.o)
			if !errors.Is(err, floodgate.ErrInvalidConfig) || l != nil {
				t.Errorf("New = %v, %v; want nil and ErrInvalidConfig", l, err)
			}
		})
	}
}

func TestNewWithoutObserver(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := observe.New(s, floodgate.FixedWindow{Limit: 1, Window: time.Second}, "x", &observe.Observer{OnBreaker: func(context.Context, observe.BreakerChange) {}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := floodgate.New(s, floodgate.FixedWindow{Limit: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%T", l) != fmt.Sprintf("%T", plain) {
		t.Errorf("New without decision observers returned a %T, want floodgate.New's %T", l, plain)
	}
}

func TestTallyAllocations(t *testing.T) {
	var tally observe.Tally
	var n atomic.Int64
	o := &observe.Observer{Tally: &tally, LatencyEvery: 1, OnTimed: func(context.Context, observe.Decision) { n.Add(1) }}
	alg := floodgate.Limits{
		floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1000},
		floodgate.FixedWindow{Limit: 1 << 40, Window: time.Second},
	}
	l := newObserved(t, alg, nil, "a", o)
	ctx := context.Background()
	for name, f := range map[string]func(){
		"Allow":  func() { _, _ = l.Allow(ctx, "k") },
		"AllowN": func() { _, _ = l.AllowN(ctx, "k", 2) },
		"Apply":  func() { _, _ = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 3}) },
	} {
		if a := testing.AllocsPerRun(1000, f); a != 0 {
			t.Errorf("%s allocates %v times with a Tally, want 0", name, a)
		}
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
	if len(cs) != 1 || cs[0].Decisions[observe.KindTake][observe.Allowed] != 100 {
		t.Errorf("Read() = %+v, want one name with 100 admitted takes", cs)
	}
}
