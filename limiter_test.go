package floodgate_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

const ms = time.Millisecond

// t0 is the instant the step-driven tests start at: aligned to every window
// they use.
var t0 = time.Unix(1_700_000_000, 0)

// algCase is one algorithm configuration the Limiter tests run.
type algCase struct {
	name string
	alg  floodgate.Algorithm
	// refunds reports whether the algorithm gives units back (OpSettle).
	refunds bool
}

// fiveAlgorithms are the five algorithms with a quota of 5 restored within
// 500 ms (the buckets) or per 1 s window.
var fiveAlgorithms = []algCase{
	{"TokenBucket", floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 5}, true},
	{"LeakyBucket", floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 5}, false},
	{"FixedWindow", floodgate.FixedWindow{Limit: 5, Window: time.Second}, true},
	{"SlidingWindow", floodgate.SlidingWindow{Limit: 5, Window: time.Second}, true},
	{"SlidingLog", floodgate.SlidingLog{Limit: 5, Window: time.Second}, true},
}

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
}

// newLimiter returns a Limiter running alg on a fresh memstore whose clock
// is clock.
func newLimiter(t tb, alg floodgate.Algorithm, clock *floodgatetest.Clock) *floodgate.Limiter {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	l, err := floodgate.New(s, alg, nil)
	require.NoError(t, err)
	return l
}

// decide calls AllowN and requires no error.
func decide(t tb, l *floodgate.Limiter, key string, n int64) floodgate.Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, n)
	require.NoError(t, err, "AllowN(%q, %d)", key, n)
	return d
}

// reserveOK calls Reserve and requires no error.
func reserveOK(t tb, l *floodgate.Limiter, key string, n int64, maxDelay time.Duration) floodgate.Decision {
	t.Helper()
	d, err := l.Reserve(context.Background(), key, n, maxDelay)
	require.NoError(t, err, "Reserve(%q, %d, %v)", key, n, maxDelay)
	return d
}

// maxUsableWindow is the longest window New accepts: MaxWindow rounded down
// to whole microseconds.
const maxUsableWindow = floodgate.MaxWindow / time.Microsecond * time.Microsecond

func TestNewRejectsInvalidConfigs(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	tooLong := maxUsableWindow + time.Microsecond // a whole number of µs, above MaxWindow
	require.Greater(t, tooLong, floodgate.MaxWindow)

	cases := []struct {
		name  string
		store floodgate.Store
		alg   floodgate.Algorithm
	}{
		{"nil store", nil, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}},
		{"nil algorithm", s, nil},

		{"TokenBucket/zero value", s, floodgate.TokenBucket{}},
		{"TokenBucket/zero rate", s, floodgate.TokenBucket{Per: time.Second, Burst: 1}},
		{"TokenBucket/negative rate", s, floodgate.TokenBucket{Rate: -1, Per: time.Second, Burst: 1}},
		{"TokenBucket/zero per", s, floodgate.TokenBucket{Rate: 1, Burst: 1}},
		{"TokenBucket/negative per", s, floodgate.TokenBucket{Rate: 1, Per: -time.Second, Burst: 1}},
		{"TokenBucket/zero burst", s, floodgate.TokenBucket{Rate: 1, Per: time.Second}},
		{"TokenBucket/negative burst", s, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: -5}},
		{"TokenBucket/more than one unit per ns", s, floodgate.TokenBucket{Rate: 2, Per: 1, Burst: 1}},
		{"TokenBucket/a billion and one per second", s, floodgate.TokenBucket{Rate: 1e9 + 1, Per: time.Second, Burst: 1}},
		{"TokenBucket/restore longer than MaxWindow", s, floodgate.TokenBucket{Rate: 1, Per: floodgate.MaxWindow, Burst: 2}},
		{"TokenBucket/restore one ns over MaxWindow", s, floodgate.TokenBucket{Rate: 1, Per: 1, Burst: int64(floodgate.MaxWindow) + 1}},
		{"TokenBucket/burst times interval overflows", s, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: math.MaxInt64}},

		{"LeakyBucket/zero value", s, floodgate.LeakyBucket{}},
		{"LeakyBucket/zero rate", s, floodgate.LeakyBucket{Per: time.Second, Capacity: 1}},
		{"LeakyBucket/negative rate", s, floodgate.LeakyBucket{Rate: -10, Per: time.Second, Capacity: 1}},
		{"LeakyBucket/zero per", s, floodgate.LeakyBucket{Rate: 1, Capacity: 1}},
		{"LeakyBucket/negative per", s, floodgate.LeakyBucket{Rate: 1, Per: -1, Capacity: 1}},
		{"LeakyBucket/zero capacity", s, floodgate.LeakyBucket{Rate: 1, Per: time.Second}},
		{"LeakyBucket/negative capacity", s, floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: -1}},
		{"LeakyBucket/more than one unit per ns", s, floodgate.LeakyBucket{Rate: 1001, Per: time.Microsecond, Capacity: 1}},
		{"LeakyBucket/drain longer than MaxWindow", s, floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: 24 * 365}},
		{"LeakyBucket/capacity times interval overflows", s, floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: math.MaxInt64 / 1000}},
		// The sliding counter's float64 estimate is exact up to 2^53 units.
		{"SlidingWindow/limit above 2^53", s, floodgate.SlidingWindow{Limit: 1<<53 + 1, Window: time.Second}},
		{"SlidingWindow/max limit", s, floodgate.SlidingWindow{Limit: math.MaxInt64, Window: time.Second}},
		{"FixedWindow/limit above 2^53", s, floodgate.FixedWindow{Limit: 1<<53 + 1, Window: time.Second}},
		{"SlidingLog/limit above 2^53", s, floodgate.SlidingLog{Limit: 1<<53 + 1, Window: time.Second}},
	}
	for _, kind := range []struct {
		name string
		make func(limit int64, window time.Duration) floodgate.Algorithm
	}{
		{"FixedWindow", func(l int64, w time.Duration) floodgate.Algorithm { return floodgate.FixedWindow{Limit: l, Window: w} }},
		{"SlidingWindow", func(l int64, w time.Duration) floodgate.Algorithm {
			return floodgate.SlidingWindow{Limit: l, Window: w}
		}},
		{"SlidingLog", func(l int64, w time.Duration) floodgate.Algorithm { return floodgate.SlidingLog{Limit: l, Window: w} }},
	} {
		for _, c := range []struct {
			name   string
			limit  int64
			window time.Duration
		}{
			{"zero value", 0, 0},
			{"zero limit", 0, time.Second},
			{"negative limit", -1, time.Second},
			{"min limit", math.MinInt64, time.Second},
			{"zero window", 1, 0},
			{"negative window", 1, -time.Second},
			{"window of 1 ns", 1, 1},
			{"window not whole µs", 1, time.Second + 1},
			{"window 1.5 µs", 1, 1500},
			{"window longer than MaxWindow", 1, tooLong},
			{"max window", 1, math.MaxInt64},
		} {
			cases = append(cases, struct {
				name  string
				store floodgate.Store
				alg   floodgate.Algorithm
			}{kind.name + "/" + c.name, s, kind.make(c.limit, c.window)})
		}
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l *floodgate.Limiter
			var err error
			require.NotPanics(t, func() { l, err = floodgate.New(tc.store, tc.alg, nil) })
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "New(%v, %v) = %v, want ErrInvalidConfig", tc.store, tc.alg, err)
			assert.Nil(t, l)
			if tc.store != nil && tc.alg != nil {
				assert.ErrorIs(t, tc.alg.Validate(), floodgate.ErrInvalidConfig, "%v.Validate()", tc.alg)
				assert.Equal(t, floodgate.Policy{}, tc.alg.Policy(), "%v.Policy() of an invalid config", tc.alg)
			}
		})
	}
}

func TestNewAcceptsBoundaryConfigs(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		alg  floodgate.Algorithm
		want floodgate.Policy
	}{
		{"TokenBucket/one unit per ns", floodgate.TokenBucket{Rate: 1000, Per: time.Microsecond, Burst: 1}, floodgate.Policy{Quota: 1, Window: 1}},
		{"TokenBucket/restore exactly MaxWindow", floodgate.TokenBucket{Rate: 1, Per: 1, Burst: int64(floodgate.MaxWindow)},
			floodgate.Policy{Quota: int64(floodgate.MaxWindow), Window: floodgate.MaxWindow}},
		{"TokenBucket/one per MaxWindow", floodgate.TokenBucket{Rate: 1, Per: floodgate.MaxWindow, Burst: 1}, floodgate.Policy{Quota: 1, Window: floodgate.MaxWindow}},
		// ⌈Per/Rate⌉ must not overflow: this is one unit per ns, not an
		// interval of 0 (which once passed Validate and divided by zero).
		{"TokenBucket/max rate, max per", floodgate.TokenBucket{Rate: math.MaxInt64, Per: math.MaxInt64, Burst: 2}, floodgate.Policy{Quota: 2, Window: 2}},
		{"LeakyBucket/max rate, max per", floodgate.LeakyBucket{Rate: math.MaxInt64 - 1, Per: math.MaxInt64, Capacity: 2}, floodgate.Policy{Quota: 2, Window: 4}},
		{"LeakyBucket/one unit per ns", floodgate.LeakyBucket{Rate: 1, Per: 1, Capacity: 7}, floodgate.Policy{Quota: 7, Window: 7}},
		{"FixedWindow/1 µs", floodgate.FixedWindow{Limit: 1, Window: time.Microsecond}, floodgate.Policy{Quota: 1, Window: time.Microsecond}},
		{"SlidingWindow/longest window", floodgate.SlidingWindow{Limit: 1, Window: maxUsableWindow}, floodgate.Policy{Quota: 1, Window: maxUsableWindow}},
		{"SlidingWindow/limit 2^53", floodgate.SlidingWindow{Limit: 1 << 53, Window: time.Microsecond}, floodgate.Policy{Quota: 1 << 53, Window: time.Microsecond}},
		{"FixedWindow/limit 2^53", floodgate.FixedWindow{Limit: 1 << 53, Window: time.Second}, floodgate.Policy{Quota: 1 << 53, Window: time.Second}},
		{"SlidingLog/limit 2^53", floodgate.SlidingLog{Limit: 1 << 53, Window: time.Second}, floodgate.Policy{Quota: 1 << 53, Window: time.Second}},
		{"SlidingLog/longest window", floodgate.SlidingLog{Limit: 1, Window: maxUsableWindow}, floodgate.Policy{Quota: 1, Window: maxUsableWindow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := floodgate.New(s, tc.alg, nil)
			require.NoError(t, err, "New(%v)", tc.alg)
			assert.Equal(t, tc.want, l.Policy(), "%v: Policy()", tc.alg)
			// A key per case: the cases of one kind share the store, and
			// a key's state belongs to (key, kind).
			d, err := l.Allow(context.Background(), tc.name)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "%v: Allow on a new key = %+v, want admitted", tc.alg, d)
		})
	}
}

func TestPolicy(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		alg  floodgate.Algorithm
		want floodgate.Policy
	}{
		// Burst/Rate·Per.
		{floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200}, floodgate.Policy{Quota: 200, Window: 2 * time.Second}},
		{floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 1}, floodgate.Policy{Quota: 1, Window: time.Minute}},
		// The emission interval rounds up to 333,333,334 ns.
		{floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 3}, floodgate.Policy{Quota: 3, Window: time.Second + 2}},
		// Capacity/Rate·Per.
		{floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 50}, floodgate.Policy{Quota: 50, Window: 5 * time.Second}},
		{floodgate.FixedWindow{Limit: 100, Window: time.Minute}, floodgate.Policy{Quota: 100, Window: time.Minute}},
		{floodgate.SlidingWindow{Limit: 100, Window: time.Minute}, floodgate.Policy{Quota: 100, Window: time.Minute}},
		{floodgate.SlidingLog{Limit: 7, Window: time.Hour}, floodgate.Policy{Quota: 7, Window: time.Hour}},
	} {
		t.Run(fmt.Sprint(tc.alg), func(t *testing.T) {
			assert.Equal(t, tc.want, tc.alg.Policy(), "%v.Policy()", tc.alg)
			l, err := floodgate.New(s, tc.alg, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l.Policy(), "New(%v).Policy()", tc.alg)
			d, err := l.Allow(context.Background(), "policy")
			require.NoError(t, err)
			assert.Equal(t, tc.want.Quota, d.Limit, "Allow: Decision.Limit = %d, want the quota %d", d.Limit, tc.want.Quota)
		})
	}
}

func TestKindString(t *testing.T) {
	for kind, want := range map[step.Kind]string{
		step.KindTokenBucket:   "TokenBucket",
		step.KindLeakyBucket:   "LeakyBucket",
		step.KindFixedWindow:   "FixedWindow",
		step.KindSlidingWindow: "SlidingWindow",
		step.KindSlidingLog:    "SlidingLog",
		0:                      "Kind(0)",
		42:                     "Kind(42)",
	} {
		assert.Equal(t, want, kind.String(), "Kind(%d).String()", uint8(kind))
	}
	for i, want := range []step.Kind{
		step.KindTokenBucket, step.KindLeakyBucket, step.KindFixedWindow,
		step.KindSlidingWindow, step.KindSlidingLog,
	} {
		got, err := step.KindOf(fiveAlgorithms[i].alg)
		require.NoError(t, err)
		assert.Equal(t, want, got, "KindOf(%v)", fiveAlgorithms[i].alg)
	}
}

// TestRequestErrors checks the argument errors of every method for every
// algorithm, and that none of them consumes a unit.
func TestRequestErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel2()
	long := strings.Repeat("k", floodgate.MaxKeyLen+1)
	exact := strings.Repeat("k", floodgate.MaxKeyLen)

	for _, ac := range fiveAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			l := newLimiter(t, ac.alg, clock)
			quota := ac.alg.Policy().Quota
			bg := context.Background()
			type call struct {
				name string
				do   func() error
				want error
			}
			allowN := func(ctx context.Context, key string, n int64) func() error {
				return func() error { _, err := l.AllowN(ctx, key, n); return err }
			}
			reserve := func(ctx context.Context, key string, n int64, d time.Duration) func() error {
				return func() error { _, err := l.Reserve(ctx, key, n, d); return err }
			}
			wait := func(ctx context.Context, key string, n int64) func() error {
				return func() error { return l.Wait(ctx, key, n) }
			}
			upTo := func(ctx context.Context, key string, n int64) func() error {
				return func() error {
					_, err := l.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: n}, nil)
					return err
				}
			}
			refund := func(ctx context.Context, key string, n int64) func() error {
				return func() error {
					_, err := l.Apply(ctx, key, floodgate.Request{Op: floodgate.OpSettle, N: -n, At: t0}, nil)
					return err
				}
			}
			calls := []call{
				{"Allow/empty key", func() error { _, err := l.Allow(bg, ""); return err }, floodgate.ErrEmptyKey},
				{"Allow/key too long", func() error { _, err := l.Allow(bg, long); return err }, floodgate.ErrKeyTooLong},
				{"AllowN/zero", allowN(bg, "k", 0), floodgate.ErrInvalidN},
				{"AllowN/negative", allowN(bg, "k", -1), floodgate.ErrInvalidN},
				{"AllowN/min int64", allowN(bg, "k", math.MinInt64), floodgate.ErrInvalidN},
				{"AllowN/over quota", allowN(bg, "k", quota+1), floodgate.ErrExceedsLimit},
				{"AllowN/max int64", allowN(bg, "k", math.MaxInt64), floodgate.ErrExceedsLimit},
				{"AllowN/empty key", allowN(bg, "", 1), floodgate.ErrEmptyKey},
				{"AllowN/key too long", allowN(bg, long, 1), floodgate.ErrKeyTooLong},
				{"Reserve/zero", reserve(bg, "k", 0, time.Second), floodgate.ErrInvalidN},
				{"Reserve/over quota", reserve(bg, "k", quota+1, time.Hour), floodgate.ErrExceedsLimit},
				{"Reserve/negative delay", reserve(bg, "k", 1, -1), floodgate.ErrInvalidDelay},
				{"Reserve/min delay", reserve(bg, "k", 1, math.MinInt64), floodgate.ErrInvalidDelay},
				{"Reserve/empty key", reserve(bg, "", 1, time.Second), floodgate.ErrEmptyKey},
				{"Reserve/key too long", reserve(bg, long, 1, time.Second), floodgate.ErrKeyTooLong},
				{"Reserve/cancelled", reserve(cancelled, "k", 1, time.Second), context.Canceled},
				{"Wait/zero", wait(bg, "k", 0), floodgate.ErrInvalidN},
				{"Wait/over quota", wait(bg, "k", quota+1), floodgate.ErrExceedsLimit},
				{"Wait/empty key", wait(bg, "", 1), floodgate.ErrEmptyKey},
				{"Wait/key too long", wait(bg, long, 1), floodgate.ErrKeyTooLong},
				{"Wait/cancelled", wait(cancelled, "k", 1), context.Canceled},
				{"Wait/deadline passed", wait(expired, "k", 1), context.DeadlineExceeded},
				{"AllowUpTo/zero", upTo(bg, "k", 0), floodgate.ErrInvalidN},
				{"AllowUpTo/negative", upTo(bg, "k", -7), floodgate.ErrInvalidN},
				{"AllowUpTo/empty key", upTo(bg, "", 1), floodgate.ErrEmptyKey},
				{"AllowUpTo/key too long", upTo(bg, long, 1), floodgate.ErrKeyTooLong},
				{"AllowUpTo/cancelled", upTo(cancelled, "k", 1), context.Canceled},
				{"Refund/zero", refund(bg, "k", 0), floodgate.ErrInvalidN},
				{"Refund/empty key", refund(bg, "", 1), floodgate.ErrEmptyKey},
				{"Refund/key too long", refund(bg, long, 1), floodgate.ErrKeyTooLong},
				{"Refund/cancelled", refund(cancelled, "k", 1), context.Canceled},
			}
			for _, c := range calls {
				t.Run(c.name, func(t *testing.T) {
					var err error
					require.NotPanics(t, func() { err = c.do() })
					assert.ErrorIs(t, err, c.want, "%s = %v, want %v", c.name, err, c.want)
				})
			}
			// None of them consumed anything: the whole quota is still there,
			// and a key of exactly MaxKeyLen bytes is accepted.
			d := decide(t, l, "k", quota)
			assert.True(t, d.Allowed, "AllowN(k, %d) after the errors = %+v, want admitted", quota, d)
			d = decide(t, l, exact, 1)
			assert.True(t, d.Allowed, "AllowN(<%d bytes>, 1) = %+v, want admitted", len(exact), d)
			// Allow and AllowN leave ctx to the store, and memstore decides
			// without looking at it, as x/time/rate's Allow does.
			d, err := l.AllowN(cancelled, "ended", 1)
			assert.NoError(t, err, "AllowN with an ended context on memstore")
			assert.True(t, d.Allowed, "AllowN with an ended context on memstore = %+v", d)
		})
	}
}

// TestNewAlgorithmArguments: New takes each configuration as a value or a
// pointer (the one place that dereferences); nil, a nil pointer and an
// invalid configuration are errors matching ErrInvalidConfig, not panics.
// Algorithm is closed: a type of another package cannot implement it.
func TestNewAlgorithmArguments(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	for name, alg := range map[string]floodgate.Algorithm{
		"nil":           nil,
		"nil pointer":   (*floodgate.FixedWindow)(nil),
		"invalid value": floodgate.FixedWindow{Limit: 0, Window: time.Second},
		"invalid ptr":   &floodgate.SlidingLog{Limit: 1, Window: time.Nanosecond},
	} {
		assert.NotPanics(t, func() { _, err = floodgate.New(s, alg, nil) }, name)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
	for _, ac := range fiveAlgorithms {
		ptr := reflect.New(reflect.TypeOf(ac.alg))
		ptr.Elem().Set(reflect.ValueOf(ac.alg))
		lim, err := floodgate.New(s, ptr.Interface().(floodgate.Algorithm), nil)
		require.NoError(t, err, "New(&%v)", ac.alg)
		assert.Equal(t, ac.alg, lim.Algorithm(), "New(&%v).Algorithm()", ac.alg)
		d, err := lim.Allow(context.Background(), "ptr:"+ac.name)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "New(&%v).Allow", ac.alg)
	}
}

// TestAllowIsAllowN1AndReserveZeroIsAllowN runs the same random trace through
// three limiters on identical clocks: one calls Allow (AllowN(1) when n is
// 1), one AllowN, one Reserve(…, 0). Their decisions must be identical.
func TestAllowIsAllowN1AndReserveZeroIsAllowN(t *testing.T) {
	for _, ac := range fiveAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				clock := floodgatetest.NewClock(t0)
				viaAllow, viaAllowN, viaReserve := newLimiter(rt, ac.alg, clock), newLimiter(rt, ac.alg, clock), newLimiter(rt, ac.alg, clock)
				quota := ac.alg.Policy().Quota
				ctx := context.Background()
				for i := range rapid.IntRange(1, 50).Draw(rt, "steps") {
					clock.Advance(time.Duration(rapid.Int64Range(0, int64(300*ms)).Draw(rt, "dt")))
					n := rapid.Int64Range(1, quota).Draw(rt, "n")
					var a floodgate.Decision
					var err error
					if n == 1 {
						a, err = viaAllow.Allow(ctx, "k")
					} else {
						a, err = viaAllow.AllowN(ctx, "k", n)
					}
					require.NoError(rt, err)
					b, err := viaAllowN.AllowN(ctx, "k", n)
					require.NoError(rt, err)
					c, err := viaReserve.Reserve(ctx, "k", n, 0)
					require.NoError(rt, err)
					require.Equal(rt, b, a, "step %d at T0+%v: Allow/AllowN(%d) = %+v, AllowN = %+v", i, clock.Now().Sub(t0), n, a, b)
					require.Equal(rt, b, c, "step %d at T0+%v: Reserve(%d, 0) = %+v, AllowN = %+v", i, clock.Now().Sub(t0), n, c, b)
				}
			})
		})
	}
}

// TestAllowNSteps pins AllowN's decisions for each algorithm at fixed
// instants.
func TestAllowNSteps(t *testing.T) {
	type step struct {
		at   time.Duration
		n    int64
		want floodgate.Decision
	}
	admit := func(limit, remaining int64, reset time.Duration) floodgate.Decision {
		return floodgate.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
	}
	deny := func(limit, remaining int64, retry, reset time.Duration) floodgate.Decision {
		return floodgate.Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
	}
	for _, tc := range []struct {
		name  string
		alg   floodgate.Algorithm
		steps []step
	}{
		{"TokenBucket", fiveAlgorithms[0].alg, []step{ // 100 ms per token, burst 5
			{0, 5, admit(5, 0, 500*ms)},
			{0, 1, deny(5, 0, 100*ms, 500*ms)},
			{99 * ms, 1, deny(5, 0, 1*ms, 401*ms)},
			{100 * ms, 1, admit(5, 0, 500*ms)},
			{350 * ms, 3, deny(5, 2, 50*ms, 250*ms)}, // 2.5 tokens
			{350 * ms, 2, admit(5, 0, 450*ms)},
			{time.Hour, 1, admit(5, 4, 100*ms)},
		}},
		{"LeakyBucket", fiveAlgorithms[1].alg, []step{ // 100 ms per unit, capacity 5
			{0, 2, admit(5, 3, 200*ms)},
			{0, 1, deny(5, 3, 200*ms, 200*ms)}, // AllowN never queues
			{199 * ms, 1, deny(5, 4, 1*ms, 1*ms)},
			{200 * ms, 5, admit(5, 0, 500*ms)},
			{time.Hour, 5, admit(5, 0, 500*ms)},
		}},
		{"FixedWindow", fiveAlgorithms[2].alg, []step{ // 5 per second
			{0, 3, admit(5, 2, time.Second)},
			{500 * ms, 3, deny(5, 2, 500*ms, 500*ms)},
			{999 * ms, 2, admit(5, 0, 1*ms)},
			{999 * ms, 1, deny(5, 0, 1*ms, 1*ms)},
			{1000 * ms, 5, admit(5, 0, time.Second)},
		}},
		{"SlidingWindow", fiveAlgorithms[3].alg, []step{ // 5 per sliding second
			{0, 5, admit(5, 0, 2*time.Second)},
			// At 1.2 s: est = 5·0.8 = 4; one unit fits.
			{1200 * ms, 2, deny(5, 1, 200*ms, 800*ms)},
			{1200 * ms, 1, admit(5, 0, 1800*ms)},
			// At 1.6 s: est = 5·0.4 + 1 = 3.
			{1600 * ms, 2, admit(5, 0, 1400*ms)},
		}},
		{"SlidingLog", fiveAlgorithms[4].alg, []step{ // 5 per sliding second, exact
			{0, 2, admit(5, 3, time.Second)},
			{400 * ms, 3, admit(5, 0, time.Second)},
			{999 * ms, 1, deny(5, 0, 1*ms, 401*ms)},
			{1000 * ms, 2, admit(5, 0, time.Second)}, // the 2 at 0 have left
			{1000 * ms, 1, deny(5, 0, 400*ms, time.Second)},
			{1400 * ms, 3, admit(5, 0, time.Second)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			l := newLimiter(t, tc.alg, clock)
			for i, st := range tc.steps {
				clock.Set(t0.Add(st.at))
				got := decide(t, l, "k", st.n)
				assert.Equal(t, st.want, got, "step %d: AllowN(T0+%v, %d) = %+v, want %+v", i, st.at, st.n, got, st.want)
			}
		})
	}
}

// traceOp is one call of a recorded trace, replayable on a fresh limiter.
type traceOp struct {
	at       time.Time
	op       floodgate.Op
	n        int64
	maxDelay time.Duration
	refundAt time.Time
}

func (o traceOp) String() string {
	switch o.op {
	case floodgate.OpTakeUpTo:
		return fmt.Sprintf("AllowUpTo(T0+%v, %d)", o.at.Sub(t0), o.n)
	case floodgate.OpSettle:
		return fmt.Sprintf("Refund(T0+%v, %d, at T0+%v)", o.at.Sub(t0), o.n, o.refundAt.Sub(t0))
	}
	return fmt.Sprintf("Reserve(T0+%v, %d, %v)", o.at.Sub(t0), o.n, o.maxDelay)
}

// apply runs o on l with clock set to o.at.
func (o traceOp) apply(t tb, l *floodgate.Limiter, clock *floodgatetest.Clock) floodgate.Result {
	t.Helper()
	clock.Set(o.at)
	ctx := context.Background()
	var (
		res floodgate.Result
		err error
	)
	switch o.op {
	case floodgate.OpTakeUpTo:
		res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: o.n}, nil)
	case floodgate.OpSettle:
		res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -o.n, At: o.refundAt}, nil)
	default:
		res.Decision, err = l.Reserve(ctx, "k", o.n, o.maxDelay)
	}
	require.NoError(t, err, "%v", o)
	return res
}

// replay returns a fresh limiter that has seen the trace.
func replay(t tb, alg floodgate.Algorithm, trace []traceOp) (*floodgate.Limiter, *floodgatetest.Clock) {
	t.Helper()
	clock := floodgatetest.NewClock(t0)
	l := newLimiter(t, alg, clock)
	for _, o := range trace {
		o.apply(t, l, clock)
	}
	return l, clock
}

// TestDecisionInvariants runs random traces of every call through each
// algorithm and checks every Decision:
//   - Remaining is in [0, Limit] and Limit is the quota;
//   - an admission has RetryAfter 0 and Delay ≤ maxDelay; a denial has
//     RetryAfter > 0 and Delay 0;
//   - a denial changes no state: the identical call right after gives the
//     identical Decision;
//   - RetryAfter is exact: on a limiter that saw the same trace, the same
//     request is admitted RetryAfter later and (for all but the sliding
//     counter, whose estimate is a float) still denied 1 ns before;
//   - ResetAfter is when the quota is back: AllowN(quota) is admitted
//     ResetAfter later and, for the exact algorithms, denied 1 ns before.
func TestDecisionInvariants(t *testing.T) {
	for _, ac := range fiveAlgorithms {
		t.Run(ac.name, func(t *testing.T) {
			_, float := ac.alg.(floodgate.SlidingWindow)
			rapid.Check(t, func(rt *rapid.T) {
				clock := floodgatetest.NewClock(t0)
				l := newLimiter(rt, ac.alg, clock)
				quota := ac.alg.Policy().Quota
				now := t0.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(rt, "start")))
				var (
					trace    []traceOp
					admitted []time.Time
				)
				for range rapid.IntRange(1, 25).Draw(rt, "steps") {
					if rapid.Bool().Draw(rt, "move") {
						// On a 50 ms grid half the time, to hit refill instants
						// and window ends exactly.
						if rapid.Bool().Draw(rt, "grid") {
							now = now.Add(50 * ms * time.Duration(rapid.Int64Range(1, 30).Draw(rt, "ticks")))
						} else {
							now = now.Add(time.Duration(rapid.Int64Range(1, int64(1500*ms)).Draw(rt, "dt")))
						}
					}
					o := traceOp{at: now, n: rapid.Int64Range(1, quota).Draw(rt, "n")}
					switch rapid.IntRange(0, 5).Draw(rt, "op") {
					case 0:
						o.op = floodgate.OpTakeUpTo
						o.n = rapid.Int64Range(1, quota+3).Draw(rt, "upTo")
					case 1:
						o.op = floodgate.OpSettle
						o.refundAt = now
						if len(admitted) > 0 {
							// Most often the latest admission, as a cancelled
							// Wait refunds it.
							o.refundAt = admitted[len(admitted)-1]
							if rapid.Bool().Draw(rt, "older") {
								o.refundAt = admitted[rapid.IntRange(0, len(admitted)-1).Draw(rt, "which")]
							}
						}
					case 2, 3:
						o.maxDelay = time.Duration(rapid.Int64Range(1, int64(3*time.Second)).Draw(rt, "maxDelay"))
					}
					res := o.apply(rt, l, clock)
					checkDecision(rt, ac.alg, o, res)
					if res.Allowed && o.op != floodgate.OpSettle {
						admitted = append(admitted, o.at.Add(res.Delay)) // Reserve returns no Result.At
					}
					if !res.Allowed && o.op != floodgate.OpSettle {
						again := o.apply(rt, l, clock)
						if !floodgatetest.SameResult(res, again) {
							rt.Fatalf("%v after %v: got %+v, want the identical denial %+v", o, trace, again, res)
						}
						checkRetryAfter(rt, ac.alg, trace, o, res.RetryAfter, float)
					}
					trace = append(trace, o)
					checkResetAfter(rt, ac.alg, trace, res.ResetAfter, float)
				}
			})
		})
	}
}

func checkDecision(t *rapid.T, alg floodgate.Algorithm, o traceOp, res floodgate.Result) {
	t.Helper()
	d := res.Decision
	quota := alg.Policy().Quota
	if d.Limit != quota || d.Remaining < 0 || d.Remaining > quota || d.ResetAfter < 0 || d.Delay < 0 {
		t.Fatalf("%v = %+v: want Limit %d, Remaining in [0, %d], no negative duration", o, d, quota, quota)
	}
	if o.op == floodgate.OpSettle {
		if d.Delay != 0 || d.RetryAfter != 0 || res.Granted < 0 || res.Granted > o.n || d.Allowed != (res.Granted > 0) {
			t.Fatalf("%v = %+v (granted %d): want no delay, no RetryAfter, 0 ≤ Granted ≤ n, Allowed iff Granted > 0", o, d, res.Granted)
		}
		return
	}
	if d.Allowed {
		if d.RetryAfter != 0 || d.Delay > o.maxDelay {
			t.Fatalf("%v = %+v: an admission has RetryAfter 0 and Delay ≤ %v", o, d, o.maxDelay)
		}
		if o.op == floodgate.OpTakeUpTo && (d.Delay != 0 || res.Granted < 1 || res.Granted > min(o.n, quota)) {
			t.Fatalf("%v = %+v (granted %d): want no delay and 1 ≤ Granted ≤ %d", o, d, res.Granted, min(o.n, quota))
		}
		return
	}
	if d.RetryAfter <= 0 || d.Delay != 0 || res.Granted != 0 {
		t.Fatalf("%v = %+v (granted %d): a denial has RetryAfter > 0, no Delay and grants nothing", o, d, res.Granted)
	}
}

// checkRetryAfter checks that o, denied after trace, is admitted retry later
// and, unless float, denied 1 ns before.
func checkRetryAfter(t *rapid.T, alg floodgate.Algorithm, trace []traceOp, o traceOp, retry time.Duration, float bool) {
	t.Helper()
	l, clock := replay(t, alg, trace)
	if !float {
		early := o
		early.at = o.at.Add(retry - 1)
		if res := early.apply(t, l, clock); res.Allowed {
			t.Fatalf("after %v, %v was denied with RetryAfter %v, but %v = %+v is admitted", trace, o, retry, early, res.Decision)
		}
	}
	late := o
	late.at = o.at.Add(retry)
	if res := late.apply(t, l, clock); !res.Allowed {
		t.Fatalf("after %v, %v was denied with RetryAfter %v, but %v = %+v is still denied", trace, o, retry, late, res.Decision)
	}
}

// checkResetAfter checks that the whole quota is available reset after the
// end of trace and, unless float, not 1 ns before.
func checkResetAfter(t *rapid.T, alg floodgate.Algorithm, trace []traceOp, reset time.Duration, float bool) {
	t.Helper()
	l, clock := replay(t, alg, trace)
	last := trace[len(trace)-1]
	quota := alg.Policy().Quota
	if !float && reset > 0 {
		early := traceOp{at: last.at.Add(reset - 1), n: quota}
		if res := early.apply(t, l, clock); res.Allowed {
			t.Fatalf("after %v, ResetAfter is %v, but %v = %+v is already admitted", trace, reset, early, res.Decision)
		}
	}
	full := traceOp{at: last.at.Add(reset), n: quota}
	if res := full.apply(t, l, clock); !res.Allowed {
		t.Fatalf("after %v, ResetAfter is %v, but %v = %+v is denied", trace, reset, full, res.Decision)
	}
}
