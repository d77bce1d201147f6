package floodgate_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// fuzzAlgorithm builds one of the five configurations from fuzzed fields:
// size is the burst, capacity or limit, and per doubles as the window.
func fuzzAlgorithm(kind uint8, rate, per, size int64) floodgate.Algorithm {
	if kind >= 128 {
		// A SlidingWindow with sub-windows, S from the rate's low bits
		// (out of range too).
		return floodgate.SlidingWindow{Limit: size, Window: time.Duration(per), SubWindows: int(rate%80) - 4}
	}
	switch kind % 5 {
	case 0:
		return floodgate.TokenBucket{Rate: rate, Per: time.Duration(per), Burst: size}
	case 1:
		return floodgate.LeakyBucket{Rate: rate, Per: time.Duration(per), Capacity: size}
	case 2:
		return floodgate.FixedWindow{Limit: size, Window: time.Duration(per)}
	case 3:
		return floodgate.SlidingWindow{Limit: size, Window: time.Duration(per)}
	default:
		return floodgate.SlidingLog{Limit: size, Window: time.Duration(per)}
	}
}

// wantErrs returns the errors a step of n units with maxDelay may fail with
// under quota: when several arguments are bad, any of their errors will do.
func wantErrs(op floodgate.Op, n int64, maxDelay time.Duration, quota int64) []error {
	var errs []error
	if n == 0 || n < 0 && op != floodgate.OpSettle {
		errs = append(errs, floodgate.ErrInvalidN)
	}
	if op == floodgate.OpTake && n > quota {
		errs = append(errs, floodgate.ErrExceedsLimit)
	}
	// Request.MaxDelay's doc says it is ignored by the other ops, but every
	// op rejects a negative one.
	if maxDelay < 0 {
		errs = append(errs, floodgate.ErrInvalidDelay)
	}
	return errs
}

// checkFuzzResult fails t unless res and err are a valid outcome of req
// under alg: the expected typed error, or a Decision within the invariants.
// For calls that return a Decision only, the caller sets Granted to N when
// it is allowed (what Granted must then be).
func checkFuzzResult(t *testing.T, what string, alg floodgate.Algorithm, req floodgate.Request, res floodgate.Result, err error) {
	t.Helper()
	pol := alg.Policy()
	if want := wantErrs(req.Op, req.N, req.MaxDelay, pol.Quota); len(want) > 0 || err != nil {
		if !slices.ContainsFunc(want, func(w error) bool { return errors.Is(err, w) }) {
			t.Fatalf("%v: %s = %v, want one of %v", alg, what, err, want)
		}
		return
	}
	d := res.Decision
	maxDelay := min(req.MaxDelay, floodgate.MaxDelay)
	if req.Op != floodgate.OpTake {
		maxDelay = 0
	}
	switch {
	case d.Limit != pol.Quota:
		t.Fatalf("%v: %s = %+v: Limit is not the quota %d", alg, what, d, pol.Quota)
	case d.Remaining < 0 || d.Remaining > pol.Quota:
		t.Fatalf("%v: %s = %+v: Remaining outside [0, %d]", alg, what, d, pol.Quota)
	case d.Delay < 0 || d.ResetAfter < 0 || d.RetryAfter < 0:
		t.Fatalf("%v: %s = %+v: a negative duration", alg, what, d)
	case d.ResetAfter > 6*pol.Window+floodgate.MaxDelay:
		// The state is at most a window and the longest delay ahead of the
		// latest clock reading, which the fuzzers move back by at most two
		// windows.
		t.Fatalf("%v: %s = %+v: ResetAfter beyond six windows and the longest delay", alg, what, d)
	case req.Op == floodgate.OpSettle:
		if d.RetryAfter != 0 || d.Delay != 0 || res.Granted < 0 || res.Granted > max(req.N, -req.N) || d.Allowed != (res.Granted > 0) {
			t.Fatalf("%v: %s = %+v, granted %d: a settlement neither delays nor retries, and settles 0 to |n|", alg, what, d, res.Granted)
		}
	case d.Allowed:
		if d.RetryAfter != 0 || d.Delay > maxDelay {
			t.Fatalf("%v: %s = %+v: an admission has RetryAfter 0 and Delay ≤ %v", alg, what, d, maxDelay)
		}
		if req.Op == floodgate.OpTake && res.Granted != req.N || req.Op == floodgate.OpTakeUpTo && (res.Granted < 1 || res.Granted > req.N) {
			t.Fatalf("%v: %s = %+v: granted %d of %d", alg, what, d, res.Granted, req.N)
		}
	default:
		if d.RetryAfter <= 0 || d.Delay != 0 || res.Granted != 0 {
			t.Fatalf("%v: %s = %+v, granted %d: a denial has RetryAfter > 0, no Delay and grants nothing", alg, what, d, res.Granted)
		}
	}
}

// decisionResult wraps the Decision of a call that takes all n units or
// none in the Result it stands for.
func decisionResult(d floodgate.Decision, n int64) floodgate.Result {
	res := floodgate.Result{Decision: d}
	if d.Allowed {
		res.Granted = n
	}
	return res
}

// FuzzConfig checks that any configuration either fails validation with
// ErrInvalidConfig or makes a Limiter whose decisions keep the invariants,
// for fuzzed costs and delays, without a panic.
func FuzzConfig(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(time.Second), int64(5), int64(3), int64(0), int64(4), int64(time.Second), int64(100*ms))
	f.Add(uint8(1), int64(3), int64(time.Second), int64(50), int64(50), int64(time.Hour), int64(1), int64(time.Minute), int64(1))
	f.Add(uint8(2), int64(0), int64(time.Minute), int64(100), int64(100), int64(0), int64(1), int64(time.Minute), int64(time.Minute))
	f.Add(uint8(3), int64(0), int64(time.Second), int64(10), int64(7), int64(-1), int64(10), int64(10*time.Second), int64(999*ms))
	f.Add(uint8(4), int64(0), int64(time.Second), int64(3), int64(0), int64(0), int64(4), int64(0), int64(0))
	f.Add(uint8(0), int64(1), int64(1), int64(1<<52), int64(1<<52), int64(0), int64(1), int64(1<<52), int64(1))
	f.Add(uint8(2), int64(0), int64(time.Microsecond), int64(math.MaxInt64), int64(math.MaxInt64), int64(0), int64(1), int64(0), int64(0))
	f.Add(uint8(3), int64(0), int64(time.Hour), int64(1<<60), int64(1<<59), int64(0), int64(1<<60), int64(time.Hour), int64(time.Minute))
	f.Add(uint8(0), int64(math.MaxInt64), int64(math.MaxInt64), int64(2), int64(1), int64(0), int64(1), int64(0), int64(0))
	f.Add(uint8(1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1))
	// Sub-windows (kind ≥ 128, S = rate%80 − 4).
	f.Add(uint8(128), int64(64), int64(time.Minute), int64(100), int64(30), int64(0), int64(80), int64(time.Second), int64(time.Second))
	f.Add(uint8(200), int64(8), int64(4*time.Millisecond), int64(5), int64(5), int64(3*ms), int64(2), int64(0), int64(ms))
	f.Add(uint8(255), int64(56), int64(364*24*time.Hour), int64(1000), int64(10), int64(0), int64(1000), int64(7*24*time.Hour), int64(24*time.Hour))
	f.Add(uint8(130), int64(7), int64(3*time.Second), int64(3), int64(3), int64(0), int64(3), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, kind uint8, rate, per, size, n1, d1, n2, d2, dt int64) {
		alg := fuzzAlgorithm(kind, rate, per, size)
		verr := alg.Validate()
		pol := alg.Policy()
		clock := floodgatetest.NewClock(t0)
		s, err := memstore.New(&memstore.Options{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		l, err := floodgate.New(s, alg, &floodgate.Options{Name: "test"})
		if verr != nil {
			if !errors.Is(verr, floodgate.ErrInvalidConfig) || !errors.Is(err, floodgate.ErrInvalidConfig) || l != nil {
				t.Fatalf("%v: Validate() = %v, New = %v, %v; want ErrInvalidConfig from both", alg, verr, l, err)
			}
			if pol != (floodgate.Policy{}) {
				t.Fatalf("%v: Policy() = %+v for an invalid config, want zero", alg, pol)
			}
			return
		}
		if err != nil {
			t.Fatalf("%v: Validate() = nil but New = %v", alg, err)
		}
		longest := floodgate.MaxWindow
		if kind >= 128 {
			longest = 367 * 24 * time.Hour // sub-windows
		}
		if pol.Quota != size || pol.Window <= 0 || pol.Window > longest || l.Policy() != pol {
			t.Fatalf("%v: Policy() = %+v, Limiter.Policy() = %+v: want quota %d and a window in (0, %v]", alg, pol, l.Policy(), size, longest)
		}
		ctx := context.Background()
		// memstore runs a normalized config (Rate 1 per emission interval):
		// the reference transitions run the config as given, and must agree.
		ref := new(floodgatetest.Reference)
		step := func(what string, req floodgate.Request, res floodgate.Result, err error) {
			t.Helper()
			now := clock.Now()
			what = fmt.Sprintf("%s at T0+%v", what, now.Sub(t0))
			checkFuzzResult(t, what, alg, req, res, err)
			if err != nil {
				return
			}
			req.MaxDelay = min(req.MaxDelay, floodgate.MaxDelay)
			want, werr := ref.Apply("test", "k", alg, now, req, nil)
			if werr != nil {
				t.Fatalf("%v: %s: the reference transition failed with %v", alg, what, werr)
			}
			if res.At.IsZero() { // a Decision-only call
				want.At = time.Time{}
			}
			if !floodgatetest.SameResult(want, res) {
				t.Fatalf("%v: %s:\n got %+v\nwant %+v (reference)", alg, what, res, want)
			}
		}
		// A time step of up to two windows, forwards or (a little) back.
		move := time.Duration(dt % (2*int64(pol.Window) + 1))
		if move < 0 {
			move /= 8
		}
		for i := range 3 {
			d, err := l.AllowN(ctx, "k", n1)
			step(fmt.Sprintf("AllowN(%d)", n1), floodgate.Request{N: n1}, decisionResult(d, n1), err)
			if err == nil && d.Delay != 0 {
				t.Fatalf("%v: AllowN(%d) = %+v: AllowN never delays", alg, n1, d)
			}
			d, err = l.Reserve(ctx, "k", n2, time.Duration(d1))
			step(fmt.Sprintf("Reserve(%d, %v)", n2, time.Duration(d1)), floodgate.Request{N: n2, MaxDelay: time.Duration(d1)}, decisionResult(d, n2), err)
			res, err := l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: n2}, nil)
			step(fmt.Sprintf("AllowUpTo(%d)", n2), floodgate.Request{Op: floodgate.OpTakeUpTo, N: n2}, res, err)
			req := floodgate.Request{Op: floodgate.OpTake, N: n1, MaxDelay: time.Duration(d2)}
			res, err = applyOnce(ctx, s, "k", alg, req)
			step(fmt.Sprintf("Apply(%+v)", req), req, res, err)
			if err == nil && res.Allowed {
				back := floodgate.Request{Op: floodgate.OpSettle, N: -n2, At: res.At.Add(res.Delay)}
				res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -n2, At: back.At}, nil)
				step(fmt.Sprintf("Refund(%d)", n2), back, res, err)
			}
			if i == 1 {
				clock.Advance(-move)
			} else {
				clock.Advance(move)
			}
		}
	})
}

// fuzzConfigs are the fixed configurations FuzzRequest drives: small quotas
// where decisions change often, a rate that does not divide its period, and
// limits too large to pack in one word.
var fuzzConfigs = []floodgate.Algorithm{
	floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 5},
	floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 7},
	floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 5},
	floodgate.LeakyBucket{Rate: 7, Per: time.Second, Capacity: 1},
	floodgate.FixedWindow{Limit: 5, Window: time.Second},
	floodgate.FixedWindow{Limit: 1 << 40, Window: time.Microsecond},
	floodgate.SlidingWindow{Limit: 5, Window: time.Second},
	floodgate.SlidingWindow{Limit: 1000, Window: 3 * time.Millisecond},
	floodgate.SlidingLog{Limit: 5, Window: time.Second},
	floodgate.SlidingLog{Limit: 1, Window: time.Microsecond},
}

// FuzzRequest decodes data into a trace of steps on one of fuzzConfigs (a
// step: op byte, then varints for n, maxDelay and the clock's move in
// µs) and runs it through memstore and the reference transitions: every outcome
// must keep the invariants, and the two must agree on every step.
func FuzzRequest(f *testing.F) {
	enc := func(cfg byte, steps ...[4]int64) []byte {
		b := []byte{cfg}
		for _, s := range steps {
			b = append(b, byte(s[0]))
			b = binary.AppendVarint(b, s[1])
			b = binary.AppendVarint(b, s[2])
			b = binary.AppendVarint(b, s[3])
		}
		return b
	}
	for cfg := range byte(len(fuzzConfigs)) {
		f.Add(enc(cfg, [4]int64{0, 3, 0, 0}, [4]int64{0, 3, 0, 0}, [4]int64{1, 3, int64(time.Second), 0}, [4]int64{2, 2, 0, 100_000}, [4]int64{3, 1, 0, 0}))
	}
	f.Add(enc(4, [4]int64{0, 5, 0, 999_000}, [4]int64{1, 5, int64(2 * time.Second), 0}, [4]int64{3, 5, 0, 0}, [4]int64{0, 1, 0, 1000}))
	f.Add(enc(6, [4]int64{0, 5, 0, 0}, [4]int64{1, 1, int64(5 * time.Second), 0}, [4]int64{3, 1, 0, 0}, [4]int64{0, 1, 0, 500_000}))
	f.Add(enc(0, [4]int64{0, 0, -1, -5}, [4]int64{1, -3, -1, 0}, [4]int64{2, 99, 0, 0}, [4]int64{3, 99, 0, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		alg := fuzzConfigs[int(data[0])%len(fuzzConfigs)]
		data = data[1:]
		clock := floodgatetest.NewClock(t0)
		s, err := memstore.New(&memstore.Options{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		l, err := floodgate.New(s, alg, &floodgate.Options{Name: "test"})
		if err != nil {
			t.Fatal(err)
		}
		ref := new(floodgatetest.Reference)
		ctx := context.Background()
		var admitted []time.Time
		for i := 0; len(data) > 0 && i < 64; i++ {
			op := data[0]
			data = data[1:]
			var vals [3]int64
			for j := range vals {
				v, k := binary.Varint(data)
				if k <= 0 {
					return
				}
				vals[j], data = v, data[k:]
			}
			n, maxDelay := vals[0], time.Duration(vals[1])
			// Up to about two seconds forwards or back, in µs.
			clock.Advance(time.Duration(vals[2]%2_000_000) * time.Microsecond)
			now := clock.Now()
			req := floodgate.Request{N: n, MaxDelay: maxDelay}
			var (
				res  floodgate.Result
				what string
			)
			switch op % 5 {
			case 0:
				what = fmt.Sprintf("AllowN(%d)", n)
				req.MaxDelay = 0
				res.Decision, err = l.AllowN(ctx, "k", n)
				res = decisionResult(res.Decision, n)
			case 1:
				what = fmt.Sprintf("Reserve(%d, %v)", n, maxDelay)
				res.Decision, err = l.Reserve(ctx, "k", n, maxDelay)
				res = decisionResult(res.Decision, n)
			case 2:
				what = fmt.Sprintf("AllowUpTo(%d)", n)
				req = floodgate.Request{Op: floodgate.OpTakeUpTo, N: n}
				res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: n}, nil)
			case 3:
				req = floodgate.Request{Op: floodgate.OpSettle, N: -n, At: now}
				if len(admitted) > 0 {
					req.At = admitted[int(uint64(maxDelay)%uint64(len(admitted)))]
				}
				what = fmt.Sprintf("Refund(%d, T0+%v)", n, req.At.Sub(t0))
				res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -n, At: req.At}, nil)
			default:
				req.Op = floodgate.Op(op % 4) // OpTake, OpTakeUpTo, OpSettle, or unknown
				if req.Op == floodgate.OpSettle {
					req.At = now.Add(-maxDelay)
				}
				what = fmt.Sprintf("Apply(%+v)", req)
				res, err = applyOnce(ctx, s, "k", alg, req)
			}
			what = fmt.Sprintf("step %d: %s at T0+%v", i, what, now.Sub(t0))
			if req.Op > floodgate.OpSettle {
				// An unknown Op is ErrInvalidConfig, unless another argument
				// is bad too.
				want := append(wantErrs(floodgate.OpTake, req.N, req.MaxDelay, alg.Policy().Quota), floodgate.ErrInvalidConfig)
				if !slices.ContainsFunc(want, func(w error) bool { return errors.Is(err, w) }) {
					t.Fatalf("%v: %s = %v, want one of %v", alg, what, err, want)
				}
				continue
			}
			checkFuzzResult(t, what, alg, req, res, err)
			if err != nil {
				continue
			}
			want, werr := ref.Apply("test", "k", alg, now, floodgate.Request{Op: req.Op, N: req.N, MaxDelay: min(req.MaxDelay, floodgate.MaxDelay), At: req.At}, nil)
			if werr != nil {
				t.Fatalf("%v: %s: the reference transition failed with %v", alg, what, werr)
			}
			if req.Op == floodgate.OpTake && op%5 != 4 {
				// Decision-only calls: compare the Decisions.
				want, res = floodgate.Result{Decision: want.Decision, Granted: want.Granted}, floodgate.Result{Decision: res.Decision, Granted: res.Granted}
			}
			if !floodgatetest.SameResult(want, res) {
				t.Fatalf("%v: %s:\n got %+v\nwant %+v (reference)", alg, what, res, want)
			}
			if res.Allowed && req.Op == floodgate.OpTake {
				admitted = append(admitted, now.Add(res.Delay))
			}
		}
	})
}

// applyOnce binds alg on s under the name "test" and applies req for key:
// one step outside a Limiter, on the state of the limiters named "test".
func applyOnce(ctx context.Context, s floodgate.Store, key string, alg floodgate.Algorithm, req floodgate.Request) (floodgate.Result, error) {
	b, err := s.Bind("test", alg)
	if err != nil {
		return floodgate.Result{}, err
	}
	return b.Apply(ctx, key, req, nil)
}
