package floodgate_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// The Wait tests run in a synctest bubble: memstore's default clock and
// Wait's timer both run on the bubble's virtual time, so sleeps cost nothing
// and durations are exact.

// newBubbleLimiter returns a Limiter on a memstore with the default clock,
// which inside a bubble is virtual.
func newBubbleLimiter(t *testing.T, alg floodgate.Algorithm) *floodgate.Limiter {
	t.Helper()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	l, err := floodgate.New(s, alg, nil)
	require.NoError(t, err)
	return l
}

// spend takes the whole quota of key at once, so that the next unit needs
// a delay. Of a leaky bucket it takes one unit, so that the next one queues
// behind it instead of finding the queue full.
func spend(t *testing.T, l *floodgate.Limiter, alg floodgate.Algorithm, key string) {
	t.Helper()
	n := alg.Policy().Quota
	if _, ok := alg.(floodgate.LeakyBucket); ok {
		n = 1
	}
	d, err := l.AllowN(context.Background(), key, n)
	require.NoError(t, err)
	require.True(t, d.Allowed, "AllowN(%q, %d) on a new key = %+v, want admitted", key, n, d)
}

// waitAlgorithms are the five algorithms with a quota of 1 (the leaky
// bucket: room for the unit in service and one queued), so that a second
// unit always waits.
var waitAlgorithms = []algCase{
	{"TokenBucket", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, true},
	{"LeakyBucket", floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 2}, false},
	{"FixedWindow", floodgate.FixedWindow{Limit: 1, Window: time.Second}, true},
	{"SlidingWindow", floodgate.SlidingWindow{Limit: 1, Window: time.Second}, true},
	{"SlidingLog", floodgate.SlidingLog{Limit: 1, Window: time.Second}, true},
}

func TestWaitAdmitsAtOnceWhenUnitsAreThere(t *testing.T) {
	for _, ac := range fiveAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newBubbleLimiter(t, ac.alg)
				start := time.Now()
				require.NoError(t, l.Wait(context.Background(), "k", 1))
				assert.Zero(t, time.Since(start), "Wait on a new key slept")
			})
		})
	}
}

// TestWaitSleepsExactlyTheDelay checks that Wait sleeps the Delay a Reserve
// at the same instant would give, with and without a deadline that leaves
// room for it.
func TestWaitSleepsExactlyTheDelay(t *testing.T) {
	for _, ac := range waitAlgorithms {
		for _, deadline := range []time.Duration{0, time.Hour} {
			name := ac.name + "/no deadline"
			if deadline > 0 {
				name = ac.name + "/deadline " + deadline.String()
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l, twin := newBubbleLimiter(t, ac.alg), newBubbleLimiter(t, ac.alg)
					time.Sleep(123 * ms) // off the window grid
					spend(t, l, ac.alg, "k")
					spend(t, twin, ac.alg, "k")
					want := reserveOK(t, twin, "k", 1, time.Hour)
					require.True(t, want.Allowed)
					require.Positive(t, want.Delay)

					ctx := context.Background()
					if deadline > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, deadline)
						defer cancel()
					}
					start := time.Now()
					require.NoError(t, l.Wait(ctx, "k", 1))
					assert.Equal(t, want.Delay, time.Since(start), "Wait slept %v, want the Delay %v", time.Since(start), want.Delay)
					// Wait took the units as Reserve did: both keys decide alike.
					a, b := reserveOK(t, l, "k", 1, time.Hour), reserveOK(t, twin, "k", 1, time.Hour)
					assert.Equal(t, b, a, "Reserve after Wait = %+v, after Reserve = %+v", a, b)
				})
			})
		}
	}
}

// TestWaitHandComputed pins Wait's sleep for a token bucket by hand: 3 per
// second, burst 3, spent at once; the fourth unit refills 333,333,334 ns
// later (the interval rounds up) and the fifth one interval after that.
func TestWaitHandComputed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newBubbleLimiter(t, floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 3})
		spend(t, l, floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 3}, "k")
		ctx := context.Background()
		start := time.Now()
		require.NoError(t, l.Wait(ctx, "k", 1))
		assert.Equal(t, 333_333_334*time.Nanosecond, time.Since(start))
		require.NoError(t, l.Wait(ctx, "k", 2))
		assert.Equal(t, 3*333_333_334*time.Nanosecond, time.Since(start))
	})
}

// TestWaitExceedingTheDeadline checks that a Wait whose delay is longer than
// its deadline returns at once with an error matching both
// ErrWaitExceedsDeadline and context.DeadlineExceeded, and takes nothing.
func TestWaitExceedingTheDeadline(t *testing.T) {
	for _, ac := range waitAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, twin := newBubbleLimiter(t, ac.alg), newBubbleLimiter(t, ac.alg)
				spend(t, l, ac.alg, "k")
				spend(t, twin, ac.alg, "k")
				need := reserveOK(t, newBubbleLimiterSpent(t, ac.alg), "k", 1, time.Hour).Delay
				require.Positive(t, need)

				ctx, cancel := context.WithTimeout(context.Background(), need-time.Nanosecond)
				defer cancel()
				start := time.Now()
				err := l.Wait(ctx, "k", 1)
				assert.Zero(t, time.Since(start), "Wait slept before failing")
				assert.ErrorIs(t, err, floodgate.ErrWaitExceedsDeadline, "Wait = %v", err)
				assert.ErrorIs(t, err, context.DeadlineExceeded, "Wait = %v", err)
				assert.NoError(t, ctx.Err(), "the context is still live")

				// Nothing was taken: l and its twin, which never saw the Wait,
				// decide alike from here on.
				for _, at := range []time.Duration{0, need / 2, need, 2 * need} {
					time.Sleep(at - time.Since(start))
					a, b := decide(t, l, "k", 1), decide(t, twin, "k", 1)
					assert.Equal(t, b, a, "at +%v: AllowN after the failed Wait = %+v, on the twin = %+v", at, a, b)
				}
			})
		})
	}
}

// newBubbleLimiterSpent returns a fresh limiter whose key "k" has spent its
// quota: a probe for the delay the next unit needs.
func newBubbleLimiterSpent(t *testing.T, alg floodgate.Algorithm) *floodgate.Limiter {
	t.Helper()
	l := newBubbleLimiter(t, alg)
	spend(t, l, alg, "k")
	return l
}

// TestWaitReturnsWhenTheContextEnds checks that Wait never sleeps past its
// context's end, and that the error is the context's.
func TestWaitReturnsWhenTheContextEnds(t *testing.T) {
	for _, ac := range waitAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newBubbleLimiter(t, ac.alg)
				spend(t, l, ac.alg, "k")
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(300*ms, cancel)
				start := time.Now()
				err := l.Wait(ctx, "k", 1)
				assert.ErrorIs(t, err, context.Canceled, "Wait = %v", err)
				assert.False(t, errors.Is(err, floodgate.ErrWaitExceedsDeadline), "Wait = %v", err)
				assert.Equal(t, 300*ms, time.Since(start), "Wait returned %v after the start, want at the cancellation", time.Since(start))
			})
		})
	}
}

// TestWaitGivesUnitsBackWhenCancelled checks that a Wait cancelled during
// its sleep refunds its units where the algorithm allows: afterwards, an
// AllowN that fails on a twin whose units were reserved and kept succeeds.
// The leaky bucket refunds nothing: its twin decides alike.
func TestWaitGivesUnitsBackWhenCancelled(t *testing.T) {
	for _, tc := range []struct {
		algCase
		// probe is when, after the start, an AllowN(1) succeeds only if the
		// Wait's unit came back.
		probe time.Duration
	}{
		// The reservation took the token that refills at 1 s.
		{waitAlgorithms[0], time.Second},
		{waitAlgorithms[1], 0},
		// The reservation took the only unit of the window [1 s, 2 s).
		{waitAlgorithms[2], time.Second},
		// The unit of [0, 1 s) weighs on [1 s, 2 s), so the reservation
		// went to 2 s; refunded, [2 s, 3 s) is free.
		{waitAlgorithms[3], 2 * time.Second},
		// The reservation was for 1 s, when the unit at 0 left.
		{waitAlgorithms[4], time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, twin := newBubbleLimiter(t, tc.alg), newBubbleLimiter(t, tc.alg)
				start := time.Now()
				spend(t, l, tc.alg, "k")
				spend(t, twin, tc.alg, "k")
				kept := reserveOK(t, twin, "k", 1, time.Hour)
				require.True(t, kept.Allowed)

				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(kept.Delay/2, cancel)
				err := l.Wait(ctx, "k", 1)
				require.ErrorIs(t, err, context.Canceled)
				require.Equal(t, kept.Delay/2, time.Since(start))

				if !tc.refunds {
					for _, at := range []time.Duration{kept.Delay / 2, kept.Delay, 2 * kept.Delay} {
						time.Sleep(at - time.Since(start))
						a, b := reserveOK(t, l, "k", 1, time.Hour), reserveOK(t, twin, "k", 1, time.Hour)
						assert.Equal(t, b, a, "at +%v: Reserve after the cancelled Wait = %+v, on the twin = %+v", at, a, b)
					}
					return
				}
				time.Sleep(tc.probe - time.Since(start))
				kd := decide(t, twin, "k", 1)
				require.False(t, kd.Allowed, "the twin kept its reservation: AllowN(+%v, 1) = %+v, want denied", tc.probe, kd)
				d := decide(t, l, "k", 1)
				assert.True(t, d.Allowed, "AllowN(+%v, 1) after the cancelled Wait = %+v, want admitted with the unit given back", tc.probe, d)
			})
		})
	}
}

// TestWaitCancelledBeforeTakesNothing checks that a Wait on an ended
// context neither sleeps nor takes a unit.
func TestWaitCancelledBeforeTakesNothing(t *testing.T) {
	for _, ac := range waitAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newBubbleLimiter(t, ac.alg)
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				start := time.Now()
				assert.ErrorIs(t, l.Wait(ctx, "k", 1), context.Canceled)
				assert.Zero(t, time.Since(start))
				q := ac.alg.Policy().Quota
				d := decide(t, l, "k", q)
				assert.True(t, d.Allowed, "AllowN(k, %d) after the cancelled Wait = %+v, want the whole quota", q, d)
			})
		})
	}
}

// TestWaitManyWaitersShareTheRate runs concurrent Waits on one token bucket
// and checks that they finish one interval apart, as the rate demands.
func TestWaitManyWaitersShareTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newBubbleLimiter(t, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 1})
		start := time.Now()
		const waiters = 20
		done := make(chan time.Duration, waiters)
		for range waiters {
			go func() {
				if err := l.Wait(context.Background(), "k", 1); err != nil {
					done <- -1
					return
				}
				done <- time.Since(start)
			}()
		}
		seen := map[time.Duration]bool{}
		for range waiters {
			d := <-done
			require.GreaterOrEqual(t, d, time.Duration(0), "a Wait failed")
			require.Zero(t, d%(100*ms), "a Wait ended at +%v, off the 100 ms grid", d)
			require.False(t, seen[d], "two Waits ended at +%v", d)
			seen[d] = true
		}
		assert.Equal(t, (waiters-1)*100*ms, time.Since(start))
	})
}
