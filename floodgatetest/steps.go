package floodgatetest

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// stepCase is one call in a hand-computed case: at t0+at, apply req and
// expect want (its At is t0+at).
type stepCase struct {
	at   time.Duration
	req  floodgate.Request
	want floodgate.Result
}

func refund(n int64, at time.Duration) floodgate.Request {
	return floodgate.Request{Op: floodgate.OpSettle, N: -n, At: t0.Add(at)}
}

// settle charges n units (n > 0) or gives -n back for the admission at
// t0+at.
func settle(n int64, at time.Duration) floodgate.Request {
	return floodgate.Request{Op: floodgate.OpSettle, N: n, At: t0.Add(at)}
}

// check is req as a check.
func check(req floodgate.Request) floodgate.Request {
	req.Check = true
	return req
}

// by is res as the Decision of the limit i of a Limits.
func by(i int, res floodgate.Result) floodgate.Result {
	res.Binding = i
	return res
}

func admit(limit, n, remaining int64, delay, reset time.Duration) floodgate.Result {
	return floodgate.Result{Granted: n, Decision: floodgate.Decision{
		Allowed: true, Limit: limit, Remaining: remaining, Delay: delay, ResetAfter: reset}}
}

func deny(limit, remaining int64, retry, reset time.Duration) floodgate.Result {
	return floodgate.Result{Decision: floodgate.Decision{
		Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}}
}

const ms = time.Millisecond

// stepCases are the hand-computed cases of each algorithm; the comments give
// the arithmetic.
var stepCases = []struct {
	name  string
	alg   floodgate.Algorithm
	steps []stepCase
}{
	{
		name: "TokenBucket",
		// 100 ms per token, tolerance 500 ms.
		alg: floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 5},
		steps: []stepCase{
			{0, take(3), admit(5, 3, 2, 0, 300*ms)},
			{0, take(3), deny(5, 2, 100*ms, 300*ms)},       // needs 1 more token: 100 ms
			{100 * ms, take(3), admit(5, 3, 0, 0, 500*ms)}, // exactly refilled
			{100 * ms, reserve(1, 150*ms), admit(5, 1, 0, 100*ms, 600*ms)},
			{100 * ms, reserve(2, 150*ms), deny(5, 0, 150*ms, 600*ms)}, // needs 300 ms of debt
			{2 * time.Second, take(5), admit(5, 5, 0, 0, 500*ms)},      // full again
			{2 * time.Second, upTo(4), deny(5, 0, 100*ms, 500*ms)},
			{2200 * ms, upTo(4), admit(5, 2, 0, 0, 500*ms)}, // 2 tokens back, takes both
			{2200 * ms, refund(1, 2200*ms), admit(5, 1, 1, 0, 400*ms)},
			{10 * time.Second, refund(3, 2200*ms), deny(5, 5, 0, 0)}, // full: nothing to give back
		},
	},
	{
		name: "LeakyBucket",
		// 100 ms per unit, capacity 300 ms of work.
		alg: floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 3},
		steps: []stepCase{
			{0, take(1), admit(3, 1, 2, 0, 100*ms)},
			{0, take(1), deny(3, 2, 100*ms, 100*ms)}, // AllowN never queues
			{0, reserve(1, time.Second), admit(3, 1, 1, 100*ms, 200*ms)},
			{0, reserve(1, time.Second), admit(3, 1, 0, 200*ms, 300*ms)},
			{0, reserve(1, time.Second), deny(3, 0, 100*ms, 300*ms)}, // full
			{50 * ms, reserve(1, time.Second), deny(3, 0, 50*ms, 250*ms)},
			{100 * ms, reserve(1, time.Second), admit(3, 1, 0, 200*ms, 300*ms)}, // departs at 300 ms
			{100 * ms, reserve(1, 100*ms), deny(3, 0, 200*ms, 300*ms)},          // delay bound: at 300 ms
			{100 * ms, refund(1, 300*ms), deny(3, 0, 0, 300*ms)},                // no refunds
			{time.Second, upTo(5), admit(3, 3, 0, 0, 300*ms)},
		},
	},
	{
		name: "FixedWindow",
		alg:  floodgate.FixedWindow{Limit: 3, Window: time.Second},
		steps: []stepCase{
			{900 * ms, take(2), admit(3, 2, 1, 0, 100*ms)},
			{950 * ms, take(2), deny(3, 1, 50*ms, 50*ms)},
			{950 * ms, take(1), admit(3, 1, 0, 0, 50*ms)},
			{1000 * ms, take(3), admit(3, 3, 0, 0, time.Second)}, // 6 units in 100 ms: the 2L boundary burst
			{1500 * ms, reserve(2, 600*ms), admit(3, 2, 0, 500*ms, 1500*ms)},
			{1600 * ms, take(1), deny(3, 0, 400*ms, 1400*ms)}, // the rest of this window is closed
			{2000 * ms, take(1), admit(3, 1, 0, 0, time.Second)},
			{2000 * ms, take(1), deny(3, 0, time.Second, time.Second)},
			{2100 * ms, refund(2, 2000*ms), admit(3, 2, 2, 0, 900*ms)},
			{2100 * ms, upTo(5), admit(3, 2, 0, 0, 900*ms)},
			{3100 * ms, refund(2, 2000*ms), deny(3, 3, 0, 0)}, // that window is over
		},
	},
	{
		name: "SlidingWindow",
		alg:  floodgate.SlidingWindow{Limit: 10, Window: time.Second},
		steps: []stepCase{
			{500 * ms, take(10), admit(10, 10, 0, 0, 1500*ms)},
			// est = 10·(1−0) + 0: one unit fits when 10·(1−f) ≤ 9, f = 0.1.
			{1000 * ms, take(1), deny(10, 0, 100*ms, time.Second)},
			{1250 * ms, take(2), admit(10, 2, 0, 0, 1750*ms)}, // est = 7.5
			{1250 * ms, take(1), deny(10, 0, 50*ms, 1750*ms)}, // est 9.5: 1 fits at f = 0.3
			{1250 * ms, reserve(1, 100*ms), admit(10, 1, 0, 50*ms, 1750*ms)},
			{1500 * ms, take(5), deny(10, 2, 300*ms, 1500*ms)},           // est 8: 5 fit at f = 0.8
			{1500 * ms, upTo(5), admit(10, 2, 0, 0, 1500*ms)},            // floor(10 − 8) = 2
			{1600 * ms, refund(1, 1500*ms), admit(10, 1, 2, 0, 1400*ms)}, // est = 4 + 10·0.4
			{1600 * ms, refund(4, 700*ms), admit(10, 4, 3, 0, 1400*ms)},  // from the previous window
			// At 2.9 s: prev = 4 weighs 0.4, curr 0: est = 0.4.
			{2900 * ms, take(10), deny(10, 9, 100*ms, 100*ms)},
			{2900 * ms, reserve(10, 100*ms), admit(10, 10, 0, 100*ms, 2100*ms)}, // admitted in the next window
			{2950 * ms, take(1), deny(10, 0, time.Second+150*ms, 2050*ms)},      // at 4.1 s, prev = 10
		},
	},
	{
		name: "SlidingLog",
		alg:  floodgate.SlidingLog{Limit: 3, Window: time.Second},
		steps: []stepCase{
			{0, take(1), admit(3, 1, 2, 0, time.Second)},
			{200 * ms, take(2), admit(3, 2, 0, 0, time.Second)},
			{500 * ms, take(1), deny(3, 0, 500*ms, 700*ms)},       // the unit at 0 leaves at 1 s
			{1000 * ms, take(1), admit(3, 1, 0, 0, time.Second)},  // (0, 1] excludes 0
			{1000 * ms, take(1), deny(3, 0, 200*ms, time.Second)}, // the 2 at 200 ms leave at 1.2 s
			{1000 * ms, reserve(2, 300*ms), admit(3, 2, 0, 200*ms, 1200*ms)},
			{1100 * ms, take(1), deny(3, 0, 900*ms, 1100*ms)}, // in order: after 1.2 s, and the unit at 1 s leaves at 2 s
			{1300 * ms, refund(2, 1200*ms), admit(3, 2, 2, 0, 700*ms)},
			{1300 * ms, upTo(5), admit(3, 2, 0, 0, time.Second)},
			{5 * time.Second, upTo(5), admit(3, 3, 0, 0, time.Second)},
		},
	},
	{
		// A reservation into the next window, refunded, leaves the current
		// window closed until the next one starts: ResetAfter says so, and
		// a store must not forget the empty reserved window early.
		name: "FixedWindow/refunded reservation",
		alg:  floodgate.FixedWindow{Limit: 3, Window: time.Second},
		steps: []stepCase{
			{0, take(3), admit(3, 3, 0, 0, time.Second)},
			{0, reserve(2, time.Second), admit(3, 2, 0, time.Second, 2*time.Second)},
			{500 * ms, refund(2, time.Second), admit(3, 2, 0, 0, 500*ms)},
			{500 * ms, take(1), deny(3, 0, 500*ms, 500*ms)},
			{time.Second, take(3), admit(3, 3, 0, 0, time.Second)},
		},
	},
	{
		name: "SlidingWindow/refunded reservation",
		alg:  floodgate.SlidingWindow{Limit: 1, Window: time.Second},
		steps: []stepCase{
			{0, take(1), admit(1, 1, 0, 0, 2*time.Second)},
			// est at 1 s is 1: the unit fits at 2 s, in the window after.
			{0, reserve(1, 3*time.Second), admit(1, 1, 0, 2*time.Second, 4*time.Second)},
			{500 * ms, refund(1, 2*time.Second), admit(1, 1, 0, 0, 1500*ms)}, // closed until 2 s
			{1500 * ms, take(1), deny(1, 0, 500*ms, 500*ms)},
			{2 * time.Second, take(1), admit(1, 1, 0, 0, 2*time.Second)},
		},
	},
	{
		// Charges into at most one more bucket of debt (2·tau = 1 s from
		// now), a check that changes nothing, a give-back.
		name: "TokenBucket/settle and check",
		alg:  floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 5},
		steps: []stepCase{
			{0, take(5), admit(5, 5, 0, 0, 500*ms)},
			{0, settle(3, 0), admit(5, 3, 0, 0, 800*ms)},
			{0, settle(5, 0), admit(5, 2, 0, 0, time.Second)}, // 2 fit under the bound
			{0, settle(1, 0), deny(5, 0, 0, time.Second)},     // none
			{0, check(reserve(1, time.Second)), admit(5, 1, 0, 600*ms, 1100*ms)},
			{0, reserve(1, 500*ms), deny(5, 0, 100*ms, time.Second)}, // the check took nothing
			{0, settle(-2, 0), admit(5, 2, 0, 0, 800*ms)},
		},
	},
	{
		// A charge counts in the window of the work, up to 2·Limit; a
		// window that has ended takes nothing.
		name: "FixedWindow/settle and check",
		alg:  floodgate.FixedWindow{Limit: 5, Window: time.Second},
		steps: []stepCase{
			{0, take(5), admit(5, 5, 0, 0, time.Second)},
			{500 * ms, settle(7, 0), admit(5, 5, 0, 0, 500*ms)},
			{500 * ms, check(upTo(1)), deny(5, 0, 500*ms, 500*ms)},
			{time.Second, settle(1, 500*ms), deny(5, 5, 0, 0)},
			{time.Second, take(5), admit(5, 5, 0, 0, time.Second)},
		},
	},
	{
		// A charge lands on the entry of the work, up to 2·Limit in the
		// log; a check leaves it; a give-back empties it.
		name: "SlidingLog/settle and check",
		alg:  floodgate.SlidingLog{Limit: 3, Window: time.Second},
		steps: []stepCase{
			{0, take(2), admit(3, 2, 1, 0, time.Second)},
			{200 * ms, settle(5, 0), admit(3, 4, 0, 0, 800*ms)},
			{200 * ms, check(take(1)), deny(3, 0, 800*ms, 800*ms)},
			{200 * ms, settle(-6, 0), admit(3, 6, 3, 0, 0)},
			{200 * ms, take(3), admit(3, 3, 0, 0, time.Second)},
		},
	},
	{
		// 5 per second and 7 per minute: the Decision is the binding
		// limit's, fewest left on an admission, longest RetryAfter on a
		// denial.
		name: "Limits/per second and per minute",
		alg: floodgate.Limits{
			floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5},
			floodgate.SlidingLog{Limit: 7, Window: time.Minute},
		},
		steps: []stepCase{
			{0, take(1), by(0, admit(5, 1, 4, 0, 200*ms))},
			{0, take(1), by(0, admit(5, 1, 3, 0, 400*ms))},
			{0, take(1), by(0, admit(5, 1, 2, 0, 600*ms))},
			{0, take(1), by(0, admit(5, 1, 1, 0, 800*ms))},
			{0, take(1), by(0, admit(5, 1, 0, 0, time.Second))},
			{0, take(1), by(0, deny(5, 0, 200*ms, time.Second))}, // the log would admit
			{time.Second, take(1), by(1, admit(7, 1, 1, 0, time.Minute))},
			{time.Second, take(1), by(1, admit(7, 1, 0, 0, time.Minute))},
			{time.Second, take(1), by(1, deny(7, 0, 59*time.Second, time.Minute))}, // the bucket would
			{time.Second, upTo(3), by(1, deny(7, 0, 59*time.Second, time.Minute))},
			{61 * time.Second, upTo(3), by(0, admit(5, 3, 2, 0, 600*ms))},
			{61 * time.Second, check(take(3)), by(0, deny(5, 2, 200*ms, 600*ms))},
			// The log admits at once, the bucket in 200 ms: both count the
			// units then.
			{61 * time.Second, reserve(3, time.Second), by(0, admit(5, 3, 0, 200*ms, 1200*ms))},
		},
	},
	{
		// Every limit counts a reservation at the instant it proceeds: the
		// bucket, refilled by then, is charged then, not at its own
		// earliest instant (which would lend it capacity it restores
		// before the units run).
		name: "Limits/a reservation counts when it proceeds",
		alg: floodgate.Limits{
			floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1},
			floodgate.FixedWindow{Limit: 2, Window: 10 * time.Second},
		},
		steps: []stepCase{
			{0, take(1), by(0, admit(1, 1, 0, 0, time.Second))},
			{0, reserve(1, 5*time.Second), by(1, admit(2, 1, 0, time.Second, 10*time.Second))},
			{0, reserve(1, 20*time.Second), by(0, admit(1, 1, 0, 10*time.Second, 11*time.Second))},
			{10 * time.Second, take(1), by(0, deny(1, 0, time.Second, time.Second))},
			{11 * time.Second, take(1), by(1, admit(2, 1, 0, 0, 9*time.Second))},
			{11 * time.Second, settle(1, 11*time.Second), by(1, admit(2, 1, 0, 0, 9*time.Second))},
			{11 * time.Second, settle(-1, 11*time.Second), by(1, admit(2, 1, 0, 0, 9*time.Second))},
		},
	},
	{
		// AllowUpTo's RetryAfter counts a reservation ahead that holds the
		// whole quota: one unit fits when it leaves, not when it departs.
		name: "SlidingLog/take up to behind a reservation",
		alg:  floodgate.SlidingLog{Limit: 3, Window: time.Second},
		steps: []stepCase{
			{0, take(3), admit(3, 3, 0, 0, time.Second)},
			{0, reserve(3, time.Second), admit(3, 3, 0, time.Second, 2*time.Second)},
			{500 * ms, upTo(1), deny(3, 0, 1500*ms, 1500*ms)},
			{2 * time.Second, upTo(1), admit(3, 1, 2, 0, time.Second)},
		},
	},
}

// stepRoutes are the ways the hand-computed cases reach a store: each case
// runs once per way, on a key of its own.
var stepRoutes = []struct {
	name  string
	route func(floodgate.Request) route
}{
	// What a user calls: Allow/AllowN (the store's Take), Reserve, and
	// Apply for the steps no other method makes.
	{"Limiter", typed},
	// Limiter.Apply for every step: the whole Result.
	{"Limiter.Apply", func(floodgate.Request) route { return viaLimiterApply }},
	// The Bound without a Limiter: Take for the steps it can make.
	{"Bound", func(req floodgate.Request) route {
		if typed(req) == viaAllowN {
			return viaBoundTake
		}
		return viaBoundApply
	}},
}

// runSteps runs the hand-computed cases on a virtual clock, through a
// Limiter and through the Bound. They pin down the reference transitions
// as much as the store.
func (h *harness) runSteps(t *testing.T) {
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(t0)
			s := h.open(t, clock.Now)
			p := s.pair(t, tc.alg)
			for _, sr := range stepRoutes {
				key := "steps/" + sr.name
				for i, st := range tc.steps {
					clock.Set(t0.Add(st.at))
					r := sr.route(st.req)
					got, err := p.do(context.Background(), r, key, st.req)
					if err != nil {
						t.Fatalf("%s: step %d: %v %s at t0+%v: %v", sr.name, i, r, opString(st.req, t0), st.at, err)
					}
					want := st.want
					want.At = t0.Add(st.at)
					if !same(r, want, got) {
						t.Errorf("%s: step %d: %v %s at t0+%v:\n got %s\nwant %s",
							sr.name, i, r, opString(st.req, t0), st.at, show(r, got), show(r, want))
					}
				}
			}
		})
	}
}
