package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// NewStore returns a fresh store whose clock is now. The store may share a
// backend with others (a Redis server): the suite uses keys unique to each
// test.
type NewStore func(t *testing.T, now func() time.Time) floodgate.Store

// T0 is the suite's starting instant, aligned to every window it uses.
var T0 = time.Unix(1_700_000_000, 0)

// Run runs the whole suite against the stores newStore makes.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Steps", func(t *testing.T) { RunSteps(t, newStore) })
	t.Run("Errors", func(t *testing.T) { RunErrors(t, newStore) })
	t.Run("Reference", func(t *testing.T) { RunReference(t, newStore) })
	t.Run("Models", func(t *testing.T) { RunModels(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { RunConcurrent(t, newStore, 16, 200) })
}

// stepCase is one call in a step-driven case: at T0+at, apply req and expect
// want (At is filled in from at).
type stepCase struct {
	at   time.Duration
	req  floodgate.Request
	want floodgate.Result
}

func take(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTake, N: n} }
func reserve(n int64, maxDelay time.Duration) floodgate.Request {
	return floodgate.Request{Op: floodgate.OpTake, N: n, MaxDelay: maxDelay}
}
func upTo(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTakeUpTo, N: n} }
func refund(n int64, at time.Duration) floodgate.Request {
	return floodgate.Request{Op: floodgate.OpRefund, N: n, At: T0.Add(at)}
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

// RunSteps runs the hand-computed cases. They pin down the reference Steps
// as much as the store.
func RunSteps(t *testing.T, newStore NewStore) {
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(T0)
			s := newStore(t, clock.Now)
			key := Key(t, "k")
			for i, st := range tc.steps {
				clock.Set(T0.Add(st.at))
				got, err := apply(context.Background(), s, key, tc.alg, st.req)
				require.NoError(t, err, "step %d", i)
				want := st.want
				want.At = T0.Add(st.at)
				assertResult(t, want, got, "step %d: Apply(T0+%v, %+v)", i, st.at, st.req)
			}
		})
	}
}

// assertResult compares results, with the instants compared as instants.
func assertResult(t *testing.T, want, got floodgate.Result, msgAndArgs ...any) {
	t.Helper()
	assert.True(t, want.At.Equal(got.At), "%s: At = %v, want %v", fmt.Sprintf(msgAndArgs[0].(string), msgAndArgs[1:]...), got.At, want.At)
	want.At, got.At = time.Time{}, time.Time{}
	assert.Equal(t, want, got, msgAndArgs...)
}

// Key returns a key unique to t and name, for stores shared between tests.
func Key(t *testing.T, name string) string {
	return fmt.Sprintf("%s/%s/%d", strings.ReplaceAll(t.Name(), " ", "_"), name, keySeq.Add(1))
}

var keySeq atomic.Int64

// RunErrors checks that bad arguments give typed errors and no panic.
func RunErrors(t *testing.T, newStore NewStore) {
	clock := NewClock(T0)
	s := newStore(t, clock.Now)
	ctx := context.Background()
	good := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2}
	cases := []struct {
		name string
		key  string
		alg  floodgate.Algorithm
		req  floodgate.Request
		want error
	}{
		{"empty key", "", good, take(1), floodgate.ErrEmptyKey},
		{"long key", strings.Repeat("k", floodgate.MaxKeyLen+1), good, take(1), floodgate.ErrKeyTooLong},
		{"n zero", "k", good, take(0), floodgate.ErrInvalidN},
		{"n negative", "k", good, take(-3), floodgate.ErrInvalidN},
		{"n over burst", "k", good, take(3), floodgate.ErrExceedsLimit},
		{"negative delay", "k", good, reserve(1, -time.Second), floodgate.ErrInvalidDelay},
		{"zero rate", "k", floodgate.TokenBucket{Per: time.Second, Burst: 1}, take(1), floodgate.ErrInvalidConfig},
		{"zero burst", "k", floodgate.TokenBucket{Rate: 1, Per: time.Second}, take(1), floodgate.ErrInvalidConfig},
		{"negative capacity", "k", floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: -1}, take(1), floodgate.ErrInvalidConfig},
		{"zero window", "k", floodgate.FixedWindow{Limit: 1}, take(1), floodgate.ErrInvalidConfig},
		{"sub-microsecond window", "k", floodgate.SlidingWindow{Limit: 1, Window: 1500}, take(1), floodgate.ErrInvalidConfig},
		{"zero limit", "k", floodgate.SlidingLog{Window: time.Second}, take(1), floodgate.ErrInvalidConfig},
		{"n over limit", "k", floodgate.SlidingLog{Limit: 2, Window: time.Second}, take(3), floodgate.ErrExceedsLimit},
		{"unknown op", "k", good, floodgate.Request{Op: 99, N: 1}, floodgate.ErrInvalidConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == "k" {
				key = Key(t, "k")
			}
			_, err := apply(ctx, s, key, tc.alg, tc.req)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "Apply(%q, %v, %+v) = %v, want %v", key, tc.alg, tc.req, err, tc.want)
		})
	}
}

// RunConcurrent hammers one key per algorithm from goroutines×calls calls on
// a frozen clock, and checks the admitted count is the quota exactly (for
// the sliding counter: at most the quota).
func RunConcurrent(t *testing.T, newStore NewStore, goroutines, calls int) {
	total := int64(goroutines * calls)
	quota := total / 4
	// Windows are long so that a real server's TTLs outlive the test.
	for _, tc := range []struct {
		alg     floodgate.Algorithm
		req     floodgate.Request
		want    int64
		atMost  bool
		delayed bool
	}{
		{alg: floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: quota}, req: take(1), want: quota},
		{alg: floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: quota}, req: take(1), want: 1},
		{alg: floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: quota}, req: reserve(1, time.Hour), want: quota, delayed: true},
		{alg: floodgate.FixedWindow{Limit: quota, Window: time.Hour}, req: take(1), want: quota},
		{alg: floodgate.SlidingWindow{Limit: quota, Window: time.Hour}, req: take(1), want: quota, atMost: true},
		{alg: floodgate.SlidingLog{Limit: quota, Window: time.Hour}, req: take(1), want: quota},
		{alg: floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: quota}, req: upTo(3), want: quota},
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.alg, tc.req.Op), func(t *testing.T) {
			clock := NewClock(T0.Add(30 * time.Minute))
			s := newStore(t, clock.Now)
			key := Key(t, "hot")
			var (
				admitted atomic.Int64
				delays   sync.Map
				errs     = make(chan error, goroutines)
				wg       sync.WaitGroup
			)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range calls {
						res, err := apply(context.Background(), s, key, tc.alg, tc.req)
						if err != nil {
							errs <- err
							return
						}
						admitted.Add(res.Granted)
						if res.Allowed && tc.delayed {
							if _, dup := delays.LoadOrStore(res.Delay, true); dup {
								errs <- fmt.Errorf("two requests got the departure slot %v", res.Delay)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			if tc.atMost {
				assert.LessOrEqual(t, admitted.Load(), tc.want, "admitted")
				assert.Positive(t, admitted.Load())
			} else {
				assert.Equal(t, tc.want, admitted.Load(), "admitted")
			}
		})
	}
}

// apply binds alg on s and applies req for key.
func apply(ctx context.Context, s floodgate.Store, key string, alg floodgate.Algorithm, req floodgate.Request) (floodgate.Result, error) {
	b, err := s.Bind(alg)
	if err != nil {
		return floodgate.Result{}, err
	}
	return b.Apply(ctx, key, req)
}
