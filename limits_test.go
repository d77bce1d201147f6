package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

var (
	perSecond = floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5}
	perMinute = floodgate.SlidingLog{Limit: 20, Window: time.Minute}
)

func TestLimitsValidate(t *testing.T) {
	nine := make(floodgate.Limits, 9)
	for i := range nine {
		nine[i] = perSecond
	}
	var nilTB *floodgate.TokenBucket
	for _, tc := range []struct {
		name string
		ls   floodgate.Limits
	}{
		{"empty", floodgate.Limits{}},
		{"nil", nil},
		{"nine limits", nine},
		{"a nil limit", floodgate.Limits{perSecond, nil}},
		{"a nil pointer", floodgate.Limits{nilTB}},
		{"a nested Limits", floodgate.Limits{perSecond, floodgate.Limits{perMinute}}},
		{"a pointer to a Limits", floodgate.Limits{&floodgate.Limits{perMinute}}},
		{"an invalid limit", floodgate.Limits{perSecond, floodgate.FixedWindow{Limit: 0, Window: time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.ls.Validate(), floodgate.ErrInvalidConfig)
			assert.Equal(t, floodgate.Policy{}, tc.ls.Policy(), "the Policy of an invalid Limits")
			s, err := memstore.New(nil)
			require.NoError(t, err)
			l, err := floodgate.New(s, tc.ls, nil)
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
			assert.Nil(t, l)
			_, err = s.Bind("test", tc.ls)
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "memstore binds only a valid Limits")
		})
	}
}

func TestLimitsPolicyAndString(t *testing.T) {
	ls := floodgate.Limits{perMinute, perSecond}
	require.NoError(t, ls.Validate())
	assert.Equal(t, perSecond.Policy(), ls.Policy(), "the smallest quota")
	assert.Equal(t, "Limits{SlidingLog{20 per 1m0s}, TokenBucket{5 per 1s, burst 5}}", ls.String())
	// Equal quotas: the first.
	eq := floodgate.Limits{floodgate.FixedWindow{Limit: 5, Window: time.Hour}, perSecond}
	assert.Equal(t, time.Hour, eq.Policy().Window)
}

// TestLimitsNew checks that New takes pointers to limits and to a Limits,
// keeps its own copy, and refuses a take above the smallest quota.
func TestLimitsNew(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	tb := perSecond
	ls := floodgate.Limits{&tb, perMinute}
	l, err := floodgate.New(s, &ls, nil)
	require.NoError(t, err)
	ls[1] = floodgate.FixedWindow{Limit: 1, Window: time.Second}
	tb.Burst = 1
	assert.Equal(t, floodgate.Limits{perSecond, perMinute}, l.Algorithm(), "New copies the limits and dereferences them")
	ctx := context.Background()
	_, err = l.AllowN(ctx, "k", 6)
	assert.ErrorIs(t, err, floodgate.ErrExceedsLimit)
	_, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 6}, nil)
	assert.ErrorIs(t, err, floodgate.ErrExceedsLimit)
	d, err := l.AllowN(ctx, "k", 5)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// TestLimitsDenialChangesNothing: a denial by one limit leaves the other
// limits' states as they were, and a check changes nothing, through every
// call of a Limiter.
func TestLimitsDenialChangesNothing(t *testing.T) {
	clock := floodgatetest.NewClock(t0)
	s, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	ls := floodgate.Limits{floodgate.FixedWindow{Limit: 3, Window: time.Hour}, floodgate.FixedWindow{Limit: 10, Window: time.Hour}}
	l, err := floodgate.New(s, ls, &floodgate.Options{Name: "plan"})
	require.NoError(t, err)
	ctx := context.Background()
	each := make([]floodgate.Decision, 2)
	for range 3 {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	for range 20 {
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		_, err = l.Apply(ctx, "k", floodgate.Request{N: 1, Check: true}, each)
		require.NoError(t, err)
	}
	// Each[1] is what the second limit alone would do: admit, leaving 6 of
	// 10 after the 3 admissions (and nothing of the 40 denials and checks).
	require.True(t, each[1].Allowed)
	require.Equal(t, int64(6), each[1].Remaining)
	// Through a Limits of the same name whose first fixed window is roomy,
	// sharing both windows' states: the second limit's 7 units are there
	// to take.
	wide, err := floodgate.New(s, floodgate.Limits{floodgate.FixedWindow{Limit: 100, Window: time.Hour}, ls[1]}, &floodgate.Options{Name: "plan"})
	require.NoError(t, err)
	res, err := wide.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 100}, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(7), res.Granted)
	assert.Equal(t, 1, res.Binding)
}

// FuzzLimits builds a Limits of two fuzzed configurations and checks that
// it either fails validation with ErrInvalidConfig, or decides as the
// reference (step.Limits) does, through memstore's Take and Apply, for
// fuzzed costs, delays, settlements and checks.
func FuzzLimits(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(time.Second), int64(5), uint8(4), int64(0), int64(time.Minute), int64(20), int64(3), int64(100*ms), int64(2), uint8(0))
	f.Add(uint8(2), int64(0), int64(time.Second), int64(3), uint8(2), int64(0), int64(time.Hour), int64(7), int64(1), int64(time.Second), int64(-2), uint8(3))
	f.Add(uint8(1), int64(10), int64(time.Second), int64(5), uint8(3), int64(0), int64(time.Second), int64(5), int64(5), int64(time.Hour), int64(9), uint8(7))
	f.Add(uint8(0), int64(1), int64(1), int64(1<<52), uint8(0), int64(1), int64(time.Second), int64(1), int64(1), int64(0), int64(math.MinInt64), uint8(255))
	f.Add(uint8(4), int64(0), int64(time.Microsecond), int64(1), uint8(1), int64(-1), int64(-1), int64(-1), int64(0), int64(-1), int64(0), uint8(1))
	f.Fuzz(func(t *testing.T, k1 uint8, r1, p1, s1 int64, k2 uint8, r2, p2, s2, n, d, settle int64, ops uint8) {
		ls := floodgate.Limits{fuzzAlgorithm(k1, r1, p1, s1), fuzzAlgorithm(k2, r2, p2, s2)}
		verr := ls.Validate()
		clock := floodgatetest.NewClock(t0)
		s, err := memstore.New(&memstore.Options{Now: clock.Now})
		require.NoError(t, err)
		l, err := floodgate.New(s, ls, nil)
		if verr != nil {
			if !errors.Is(verr, floodgate.ErrInvalidConfig) || !errors.Is(err, floodgate.ErrInvalidConfig) || l != nil {
				t.Fatalf("%v: Validate() = %v, New = %v, %v; want ErrInvalidConfig from both", ls, verr, l, err)
			}
			return
		}
		require.NoError(t, err, "%v: Validate() = nil", ls)
		pol := ls.Policy()
		if pol.Quota != min(s1, s2) {
			t.Fatalf("%v: Policy() = %+v, want the smaller quota", ls, pol)
		}
		ctx := context.Background()
		ref := new(floodgatetest.Reference)
		gotEach, wantEach := make([]floodgate.Decision, 2), make([]floodgate.Decision, 2)
		var last time.Time
		for i := range 8 {
			req := floodgate.Request{N: n, MaxDelay: time.Duration(d)}
			switch (ops >> (i % 8)) & 3 {
			case 1:
				req.Op = floodgate.OpTakeUpTo
			case 2:
				req = floodgate.Request{Op: floodgate.OpSettle, N: settle, At: last}
			}
			req.Check = (ops>>i)&8 != 0 && i%3 == 0
			wreq := req
			if wreq.MaxDelay > floodgate.MaxDelay { // as the Limiter passes it
				wreq.MaxDelay = floodgate.MaxDelay
			}
			want, werr := ref.Apply(l.Name(), "k", ls, clock.Now(), wreq, wantEach)
			var got floodgate.Result
			var gerr error
			if req.Op == floodgate.OpTake && req.MaxDelay == 0 && !req.Check && i%2 == 0 {
				got.Decision, gerr = l.AllowN(ctx, "k", req.N)
				if gerr == nil {
					want.At, want.Granted = time.Time{}, 0
					wantEach = gotEach // not reported
				}
			} else {
				got, gerr = l.Apply(ctx, "k", req, gotEach)
			}
			what := fmt.Sprintf("%v: step %d %+v at t0+%v", ls, i, req, clock.Now().Sub(t0))
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("%s: err = %v, want %v", what, gerr, werr)
			}
			if gerr == nil {
				if !floodgatetest.SameResult(want, got) {
					t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
				}
				if wantEach[0] != gotEach[0] || wantEach[1] != gotEach[1] {
					t.Fatalf("%s: Each = %+v, want %+v", what, gotEach, wantEach)
				}
				if got.Allowed && req.Op != floodgate.OpSettle {
					last = got.At.Add(got.Delay)
				}
				if got.Binding < 0 || got.Binding > 1 || got.Remaining < 0 {
					t.Fatalf("%s: %+v: Binding out of range or Remaining negative", what, got)
				}
			}
			wantEach = make([]floodgate.Decision, 2)
			clock.Advance(time.Duration(uint64(d)%uint64(2*pol.Window+1)) / 3)
		}
	})
}
