package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The cases on the store's own clock (newStore's now is nil) decide
// nothing that depends on the exact instant: their windows and refills
// are an hour long, so that what the clock moves during a case changes no
// decision, except at the boundary of an epoch-aligned window, which a
// case detects on the store's clock and then runs again once.

// runOwnClock runs cases on the store's own clock: decisions that do not
// depend on the instant, through every route; quotas admitted exactly once
// under concurrency; a Wait cancelled during its sleep giving its units
// back.
func (h *harness) runOwnClock(t *testing.T) {
	t.Run("Decisions", h.ownDecisions)
	t.Run("Concurrent", h.ownConcurrent)
	t.Run("Wait", h.ownWait)
}

// clockProbe reads the store's clock: Result.At of a refund on a key that
// holds nothing, which changes no state.
func clockProbe(t *testing.T, s *store) func() time.Time {
	t.Helper()
	p := s.pair(t, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1})
	return func() time.Time {
		t.Helper()
		res, err := p.lim.Apply(context.Background(), "clock", floodgate.Request{Op: floodgate.OpSettle, N: -1, At: time.Unix(0, 0)}, nil)
		if err != nil {
			t.Fatalf("reading the store's clock (a refund on an empty key): %v", err)
		}
		if res.At.IsZero() {
			t.Fatalf("Result.At of a refund is the zero time, want the store's clock")
		}
		return res.At
	}
}

// onceInWindow runs f(t, attempt) and, when the store's clock crossed a
// boundary of an epoch-aligned window of length w during it, runs it once
// more: the second attempt cannot cross another boundary. f reports a
// failure through the error it returns.
func onceInWindow(t *testing.T, s *store, w time.Duration, f func(attempt int) error) {
	t.Helper()
	now := clockProbe(t, s)
	for attempt := range 2 {
		before := now()
		err := f(attempt)
		after := now()
		if w > 0 && before.Truncate(w) != after.Truncate(w) && attempt == 0 {
			t.Logf("the store's clock crossed a window boundary (%v to %v): running again", before, after)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
}

// aligned returns alg's window, for the algorithms whose windows are
// aligned to the epoch, or 0.
func aligned(alg floodgate.Algorithm) time.Duration {
	switch a := alg.(type) {
	case floodgate.FixedWindow:
		return a.Window
	case floodgate.SlidingWindow:
		return a.Window
	}
	return 0
}

// ownStep is one call of ownDecisions and what its Decision must be,
// whatever the instant.
type ownStep struct {
	req       floodgate.Request
	allowed   bool
	remaining int64
	maxWait   time.Duration // the bound of Delay (admitted) or RetryAfter (denied)
}

// ownDecisions runs, per algorithm, a sequence whose decisions do not
// depend on the instant, once through the Take path (Allow and AllowN, and
// the Bound's Take) and once through Apply: admissions, a denial that
// changes no state (a smaller request then passes), RetryAfter on every
// denial, Remaining and Limit, a reservation, and a refund that gives units
// back.
func (h *harness) ownDecisions(t *testing.T) {
	s := h.open(t, nil)
	ctx := context.Background()
	const q = 4
	window := []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: q, Per: time.Hour, Burst: q},
		floodgate.FixedWindow{Limit: q, Window: time.Hour},
		floodgate.SlidingWindow{Limit: q, Window: time.Hour},
		floodgate.SlidingLog{Limit: q, Window: time.Hour},
	}
	// The bucket refills every 15 minutes, the windows last an hour; the
	// sliding window counter may wait for the previous window's weight to
	// decay, up to 2 windows.
	steps := []ownStep{
		{take(1), true, q - 1, 0},
		{take(q), false, q - 1, 2 * time.Hour}, // denied: changes nothing
		{take(q - 1), true, 0, 0},              // so that q-1 still fit
		{take(1), false, 0, 2 * time.Hour},
		{reserve(1, 3*time.Hour), true, 0, 2 * time.Hour},
	}
	lb := floodgate.LeakyBucket{Rate: q, Per: time.Hour, Capacity: q}
	lbSteps := []ownStep{
		{take(1), true, q - 1, 0},
		{take(1), false, q - 1, 15 * time.Minute}, // AllowN never queues
		{reserve(q, time.Hour), false, q - 1, 15 * time.Minute},
		{reserve(q-1, time.Hour), true, 0, 15 * time.Minute},
		{take(1), false, 0, time.Hour},
	}
	run := func(t *testing.T, alg floodgate.Algorithm, steps []ownStep) {
		p := s.pair(t, alg)
		policy := alg.Policy()
		for _, path := range []struct {
			name  string
			route func(i int, req floodgate.Request) route
		}{
			{"Take", func(i int, req floodgate.Request) route {
				if typed(req) != viaAllowN {
					return typed(req)
				}
				return [...]route{viaAllowN, viaBoundTake}[i%2]
			}},
			{"Apply", func(i int, req floodgate.Request) route {
				return [...]route{viaLimiterApply, viaBoundApply}[i%2]
			}},
		} {
			onceInWindow(t, s, aligned(alg), func(attempt int) error {
				key := fmt.Sprintf("own/%s/%d", path.name, attempt)
				for i, st := range steps {
					r := path.route(i, st.req)
					res, err := p.do(ctx, r, key, st.req)
					if err != nil {
						return fmt.Errorf("%s: step %d: %v %s: %v", path.name, i, r, opString(st.req, time.Time{}), err)
					}
					d := res.Decision
					wait := d.RetryAfter
					if d.Allowed {
						wait = d.Delay
					}
					bad := checkDecision(policy, d)
					switch {
					case bad != nil:
					case d.Allowed != st.allowed || d.Remaining != st.remaining:
						bad = fmt.Errorf("want Allowed %v, Remaining %d", st.allowed, st.remaining)
					case wait > st.maxWait:
						bad = fmt.Errorf("want a wait of at most %v", st.maxWait)
					case d.Allowed && st.req.MaxDelay > 0 && d.Delay <= 0:
						bad = fmt.Errorf("want a delay: the quota is spent")
					case d.ResetAfter <= 0 || d.ResetAfter > 2*policy.Window+st.maxWait:
						bad = fmt.Errorf("want 0 < ResetAfter <= %v", 2*policy.Window+st.maxWait)
					}
					if bad != nil {
						return fmt.Errorf("%s: step %d: %v %s = %+v: %v", path.name, i, r, opString(st.req, time.Time{}), d, bad)
					}
				}
				return nil
			})
		}
	}
	for _, alg := range window {
		t.Run(fmt.Sprint(kindOf(alg)), func(t *testing.T) {
			run(t, alg, steps)
			h.ownRefund(t, s, alg)
		})
	}
	t.Run(fmt.Sprint(kindOf(lb)), func(t *testing.T) { run(t, lb, lbSteps); h.ownRefund(t, s, lb) })
}

// ownRefund spends alg's quota and gives it back in two refunds for the
// instant it was admitted for: the units come back, and the whole quota is
// admitted again. The leaky bucket gives nothing back: its departure slots
// are promised.
func (h *harness) ownRefund(t *testing.T, s *store, alg floodgate.Algorithm) {
	t.Helper()
	ctx := context.Background()
	p := s.pair(t, alg)
	q := alg.Policy().Quota
	_, leaky := alg.(floodgate.LeakyBucket)
	onceInWindow(t, s, aligned(alg), func(attempt int) error {
		key := fmt.Sprintf("own/refund/%d", attempt)
		spent, err := p.lim.Apply(ctx, key, take(q), nil)
		if err != nil || !spent.Allowed {
			return fmt.Errorf("Apply(take(%d)) on a new key = %+v, %v, want admitted", q, spent, err)
		}
		half := q / 2
		for _, r := range []route{viaLimiterApply, viaBoundApply} {
			req := floodgate.Request{Op: floodgate.OpSettle, N: -half, At: spent.At.Add(spent.Delay)}
			want := half
			if leaky {
				want = 0
			}
			back, err := p.do(ctx, r, key, req)
			if err != nil || back.Granted != want || back.Allowed != (want > 0) || back.Limit != q || back.RetryAfter != 0 {
				return fmt.Errorf("%v refund(%d) for the admission at %v = %+v, %v, want %d units back", r, half, req.At, back, err, want)
			}
		}
		if leaky {
			if got, err := p.lim.Allow(ctx, key); err != nil || got.Allowed {
				return fmt.Errorf("after the refunds, Allow = %+v, %v, want denied", got, err)
			}
			return nil
		}
		if got, err := p.lim.AllowN(ctx, key, q); err != nil || !got.Allowed || got.Remaining != 0 {
			return fmt.Errorf("AllowN(%d) after the refunds of the whole quota = %+v, %v, want admitted, Remaining 0", q, got, err)
		}
		return nil
	})
}

// spy wraps a store and calls after with each of its Applies' outcomes.
type spy struct {
	floodgate.Store
	after func(req floodgate.Request, res floodgate.Result, err error)
}

func (s spy) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return spyBound{b, s.after}, nil
}

type spyBound struct {
	floodgate.Bound
	after func(req floodgate.Request, res floodgate.Result, err error)
}

func (s spyBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	res, err := s.Bound.Apply(ctx, key, req, each)
	s.after(req, res, err)
	return res, err
}

// ownWait spends a quota of one, then Waits: the Wait is admitted with a
// delay, and its context ends during the sleep, so it gives the unit back
// for the instant it was admitted for (Result.At + Delay on the store's
// clock), where the algorithm allows.
func (h *harness) ownWait(t *testing.T) {
	s := h.open(t, nil)
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1},
		floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: 2}, // room for the Wait behind the Allow
		floodgate.FixedWindow{Limit: 1, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 1, Window: time.Hour},
		floodgate.SlidingLog{Limit: 1, Window: time.Hour},
	} {
		t.Run(fmt.Sprint(kindOf(alg)), func(t *testing.T) { waitRefund(t, s, alg) })
	}
}

// waitRefund runs ownWait's case for alg on s.
func waitRefund(t *testing.T, s *store, alg floodgate.Algorithm) {
	t.Helper()
	_, leaky := alg.(floodgate.LeakyBucket)
	var (
		reserved, refunded []floodgate.Result
		cancel             context.CancelFunc
	)
	watched := spy{Store: s.Store, after: func(req floodgate.Request, res floodgate.Result, err error) {
		switch {
		case err != nil:
		case req.Op == floodgate.OpTake && res.Allowed && res.Delay > 0:
			reserved = append(reserved, res)
			cancel() // the Wait's context ends during its sleep
		case req.Op == floodgate.OpSettle:
			refunded = append(refunded, res)
		}
	}}
	lim, err := floodgate.New(watched, alg, &floodgate.Options{Name: name})
	if err != nil {
		t.Fatalf("floodgate.New: %v", err)
	}
	onceInWindow(t, s, aligned(alg), func(attempt int) error {
		key := fmt.Sprintf("own/wait/%d", attempt)
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		defer cancel()
		reserved, refunded = nil, nil
		if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
			return fmt.Errorf("on a new key, Allow = %+v, %v, want admitted", d, err)
		}
		var werr error
		withTimeout(t, 30*time.Second, "a Wait whose context ended during its sleep", func() { werr = lim.Wait(ctx, key, 1) })
		if len(reserved) != 1 {
			return fmt.Errorf("Wait(1) on a spent key = %v without a reservation with a delay, want one", werr)
		}
		if !errors.Is(werr, context.Canceled) {
			return fmt.Errorf("Wait(1) whose context ended during its sleep = %v, want context.Canceled", werr)
		}
		want := int64(1)
		if leaky {
			want = 0
		}
		if len(refunded) != 1 || refunded[0].Granted != want {
			return fmt.Errorf("the refund of the cancelled Wait (admitted at %v + %v) = %+v, want %d unit back", reserved[0].At, reserved[0].Delay, refunded, want)
		}
		if leaky {
			return nil
		}
		// The slot is free again: a new reservation gets it (or an
		// earlier one, the clock having moved on).
		again, err := s.limiter(t, name, alg).Reserve(context.Background(), key, 1, 3*time.Hour)
		if err != nil || !again.Allowed || again.Delay > reserved[0].Delay {
			return fmt.Errorf("Reserve(1) after the refund = %+v, %v, want a delay of at most the refunded Wait's %v", again, err, reserved[0].Delay)
		}
		return nil
	})
}

// ownConcurrent runs the concurrent cases on the store's own clock: one
// key, hammered by goroutines through every route, admits each quota
// exactly once (the sliding window counter at most once).
func (h *harness) ownConcurrent(t *testing.T) {
	s := h.open(t, nil)
	calls := calibrate(t, s)
	total := int64(goroutines * calls)
	for _, c := range concurrentCases {
		t.Run(c.name, func(t *testing.T) {
			q := total / 4
			alg := c.alg(q)
			p := s.pair(t, alg)
			rs := routes(c.req)
			if c.queued {
				rs = []route{viaLimiterApply, viaBoundApply} // the departures need Result.At
			}
			onceInWindow(t, s, aligned(alg), func(attempt int) error {
				key := fmt.Sprintf("own/%s/%d", c.name, attempt)
				return c.check(hammer(t, []pair{p}, []string{key}, c.req, rs, calls, time.Time{}), q, true)
			})
		})
	}
}
