package floodgate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// TestApplyUpToAndRefund pins Apply's OpTakeUpTo and OpSettle through the Limiter at fixed instants
// for each algorithm (quota 5, see fiveAlgorithms): how many units are
// granted, which refunds come back and which cannot.
func TestApplyUpToAndRefund(t *testing.T) {
	type step struct {
		at       time.Duration
		refund   bool
		n        int64
		refundAt time.Duration // for refunds: the instant the units were admitted for
		granted  int64
		// remaining is Decision.Remaining after the step.
		remaining int64
	}
	upTo := func(at time.Duration, n, granted, remaining int64) step {
		return step{at: at, n: n, granted: granted, remaining: remaining}
	}
	refund := func(at time.Duration, n int64, admitted time.Duration, granted, remaining int64) step {
		return step{at: at, refund: true, n: n, refundAt: admitted, granted: granted, remaining: remaining}
	}
	for _, tc := range []struct {
		name  string
		alg   floodgate.Algorithm
		steps []step
	}{
		{"TokenBucket", fiveAlgorithms[0].alg, []step{ // 100 ms per token, burst 5
			upTo(0, 8, 5, 0), // n above the quota is fine: granted what there is
			upTo(0, 1, 0, 0),
			refund(0, 3, 0, 3, 3),
			upTo(0, 4, 3, 0),
			upTo(250*ms, 4, 2, 0), // 2.5 tokens
			// Only units whose tokens have not refilled can come back: at
			// 550 ms the bucket lacks 1.5 tokens, which rounds up to 2; the
			// bucket is full again, never fuller.
			refund(550*ms, 9, 250*ms, 2, 5),
			refund(550*ms, 1, 250*ms, 0, 5), // full: nothing to give back
			refund(time.Hour, 5, 0, 0, 5),
		}},
		{"LeakyBucket", fiveAlgorithms[1].alg, []step{ // 100 ms per unit, capacity 5
			upTo(0, 8, 5, 0), // at most the capacity
			upTo(0, 1, 0, 0), // a queue is waiting: nothing departs at once
			refund(0, 5, 0, 0, 0),
			refund(100*ms, 1, 0, 0, 1), // no refunds, ever
			upTo(499*ms, 1, 0, 4),
			upTo(500*ms, 2, 2, 3),
		}},
		{"FixedWindow", fiveAlgorithms[2].alg, []step{ // 5 per second
			upTo(0, 3, 3, 2),
			upTo(500*ms, 3, 2, 0),
			refund(600*ms, 4, 500*ms, 4, 4), // any instant of the same window
			refund(600*ms, 9, 0, 1, 5),      // no more than were counted
			upTo(700*ms, 6, 5, 0),
			refund(1200*ms, 1, 700*ms, 0, 5), // that window is over
		}},
		{"SlidingWindow", fiveAlgorithms[3].alg, []step{ // 5 per sliding second
			upTo(0, 9, 5, 0),
			upTo(500*ms, 1, 0, 0),
			refund(500*ms, 2, 0, 2, 2),
			upTo(1600*ms, 9, 3, 0), // est = 3·0.4 = 1.2: floor(5 − 1.2) = 3
			// Refunds go to the counter of their window: 1 of the previous
			// window's 3 (weight 0.4), then 2 of this one's 3.
			refund(1600*ms, 1, 900*ms, 1, 1),        // est = 2·0.4 + 3
			refund(1600*ms, 2, 1600*ms, 2, 3),       // est = 2·0.4 + 1
			refund(3*time.Second, 1, 1600*ms, 0, 5), // both windows are over
		}},
		{"SlidingLog", fiveAlgorithms[4].alg, []step{ // 5 per sliding second, exact
			upTo(0, 2, 2, 3),
			upTo(300*ms, 9, 3, 0),
			refund(400*ms, 1, 100*ms, 0, 0), // nothing was admitted at 100 ms
			refund(400*ms, 9, 300*ms, 3, 3), // only the 3 admitted at 300 ms
			upTo(999*ms, 4, 3, 0),
			upTo(1000*ms, 4, 2, 0),           // the 2 at 0 have left
			refund(1300*ms, 1, 0, 0, 0),      // they left: nothing to give back
			refund(1300*ms, 2, 999*ms, 2, 2), // still inside the window
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			l := newLimiter(t, tc.alg, clock)
			ctx := context.Background()
			for i, st := range tc.steps {
				clock.Set(t0.Add(st.at))
				var (
					res  floodgate.Result
					err  error
					call string
				)
				if st.refund {
					res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -st.n, At: t0.Add(st.refundAt)}, nil)
					call = "Refund"
				} else {
					res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: st.n}, nil)
					call = "AllowUpTo"
				}
				require.NoError(t, err, "step %d", i)
				assert.Equal(t, st.granted, res.Granted, "step %d: %s(T0+%v, %d): Granted = %d, want %d", i, call, st.at, st.n, res.Granted, st.granted)
				assert.Equal(t, st.granted > 0, res.Allowed, "step %d: %s(T0+%v, %d): Allowed = %v with %d granted", i, call, st.at, st.n, res.Allowed, res.Granted)
				assert.Equal(t, st.remaining, res.Remaining, "step %d: %s(T0+%v, %d): Remaining = %d, want %d", i, call, st.at, st.n, res.Remaining, st.remaining)
				assert.True(t, t0.Add(st.at).Equal(res.At), "step %d: At = %v, want T0+%v", i, res.At, st.at)
				assert.Zero(t, res.Delay, "step %d: %s never delays", i, call)
				if !st.refund {
					assert.Equal(t, res.Allowed, res.RetryAfter == 0, "step %d: %s(T0+%v, %d) = %+v: RetryAfter > 0 iff denied", i, call, st.at, st.n, res.Decision)
				}
			}
		})
	}
}

// TestRefundRestoresWhatAllowNTook checks, for the algorithms that refund,
// that refunding what an AllowN took lets the same AllowN through again.
func TestRefundRestoresWhatAllowNTook(t *testing.T) {
	for _, ac := range fiveAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0.Add(250 * ms))
			l := newLimiter(t, ac.alg, clock)
			q := ac.alg.Policy().Quota
			ctx := context.Background()
			require.True(t, decide(t, l, "k", q).Allowed)
			require.False(t, decide(t, l, "k", q).Allowed)
			res, err := l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -q, At: clock.Now()}, nil)
			require.NoError(t, err)
			if !ac.refunds {
				assert.Zero(t, res.Granted, "Refund(%d) = %+v, want nothing back", q, res)
				assert.False(t, decide(t, l, "k", q).Allowed)
				return
			}
			assert.Equal(t, q, res.Granted, "Refund(%d) = %+v, want all back", q, res)
			d := decide(t, l, "k", q)
			assert.True(t, d.Allowed, "AllowN(%d) after the refund = %+v, want admitted", q, d)
		})
	}
}
