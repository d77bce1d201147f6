package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// genAlgorithm draws one of the five algorithms with a small quota and a
// window of 1 s to 30 s (long enough for a real server's TTLs to outlive a
// trace that runs in milliseconds).
func genAlgorithm(rt *rapid.T) floodgate.Algorithm {
	quota := rapid.Int64Range(1, 12).Draw(rt, "quota")
	window := time.Duration(rapid.Int64Range(1_000, 30_000).Draw(rt, "windowMs")) * time.Millisecond
	switch rapid.IntRange(0, 4).Draw(rt, "kind") {
	case 0:
		rate := rapid.Int64Range(1, 7).Draw(rt, "rate")
		return floodgate.TokenBucket{Rate: rate, Per: window, Burst: quota}
	case 1:
		rate := rapid.Int64Range(1, 7).Draw(rt, "rate")
		return floodgate.LeakyBucket{Rate: rate, Per: window, Capacity: quota}
	case 2:
		return floodgate.FixedWindow{Limit: quota, Window: window}
	case 3:
		return floodgate.SlidingWindow{Limit: quota, Window: window}
	default:
		return floodgate.SlidingLog{Limit: quota, Window: window}
	}
}

// reference applies the algorithms' Steps to state kept in maps: the
// behaviour every store must reproduce.
type reference struct {
	words map[string]int64
	fw    map[string]step.FixedWindowState
	sw    map[string]step.SlidingWindowState
	sl    map[string]*step.SlidingLogState
}

func newReference() *reference {
	return &reference{
		words: map[string]int64{},
		fw:    map[string]step.FixedWindowState{},
		sw:    map[string]step.SlidingWindowState{},
		sl:    map[string]*step.SlidingLogState{},
	}
}

func (r *reference) apply(key string, alg floodgate.Algorithm, now time.Time, req floodgate.Request) (res floodgate.Result, err error) {
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		r.words[key], res, err = step.TokenBucket(a, r.words[key], now, req)
	case floodgate.LeakyBucket:
		r.words[key], res, err = step.LeakyBucket(a, r.words[key], now, req)
	case floodgate.FixedWindow:
		r.fw[key], res, err = step.FixedWindow(a, r.fw[key], now, req)
	case floodgate.SlidingWindow:
		r.sw[key], res, err = step.SlidingWindow(a, r.sw[key], now, req)
	case floodgate.SlidingLog:
		if r.sl[key] == nil {
			r.sl[key] = new(step.SlidingLogState)
		}
		res, err = step.SlidingLog(a, r.sl[key], now, req)
	default:
		err = fmt.Errorf("unknown algorithm %T", alg)
	}
	return res, err
}

// sameResult reports whether two results are equal, instants compared as
// instants.
func sameResult(a, b floodgate.Result) bool {
	if !a.At.Equal(b.At) {
		return false
	}
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}

// RunReference runs random traces of every operation, with time moving
// forward (and now and then slightly back), through the store and through
// the reference Steps, and requires identical results.
func RunReference(t *testing.T, newStore NewStore) {
	clock := NewClock(T0)
	s := newStore(t, clock.Now)
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		alg := genAlgorithm(rt)
		quota, window := alg.Policy().Quota, alg.Policy().Window
		keys := []string{Key(t, "a"), Key(t, "b")}
		ref := newReference()
		now := T0.Add(time.Duration(rapid.Int64Range(0, int64(window)).Draw(rt, "start")))
		var admitted []time.Time // instants units were admitted for, for refunds
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "clock") {
			case 0: // stay
			case 1:
				now = now.Add(-time.Duration(rapid.Int64Range(1, int64(window)/10).Draw(rt, "back")))
			case 2, 3:
				now = now.Add(time.Duration(rapid.Int64Range(1, 2*int64(window)).Draw(rt, "jump")))
			case 4, 5, 6:
				// On a grid that hits window ends and refill instants.
				now = now.Add(window / 20 * time.Duration(rapid.Int64Range(1, 25).Draw(rt, "ticks")))
			default:
				now = now.Add(time.Duration(rapid.Int64Range(1, int64(window)/4).Draw(rt, "tick")))
			}
			clock.Set(now)
			key := keys[rapid.IntRange(0, len(keys)-1).Draw(rt, "key")]
			req := floodgate.Request{N: rapid.Int64Range(1, quota).Draw(rt, "n")}
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1:
				req.Op = floodgate.OpTakeUpTo
				req.N = rapid.Int64Range(1, quota+2).Draw(rt, "upTo")
			case 2:
				req.Op = floodgate.OpRefund
				req.At = now
				if len(admitted) > 0 && rapid.Bool().Draw(rt, "refundAdmitted") {
					req.At = admitted[rapid.IntRange(0, len(admitted)-1).Draw(rt, "which")]
				}
			case 3, 4:
				req.MaxDelay = time.Duration(rapid.Int64Range(0, 2*int64(window)).Draw(rt, "maxDelay"))
			}
			want, werr := ref.apply(key, alg, now, req)
			got, gerr := apply(ctx, s, key, alg, req)
			if (werr != nil) != (gerr != nil) {
				rt.Fatalf("step %d: %v at %v, %+v: err = %v, want %v", i, alg, now.Sub(T0), req, gerr, werr)
			}
			if werr != nil {
				continue
			}
			if !sameResult(want, got) {
				rt.Fatalf("step %d: %v on %s at T0+%v, %+v:\n got %+v\nwant %+v", i, alg, key, now.Sub(T0), req, got, want)
			}
			if got.Allowed && req.Op != floodgate.OpRefund {
				admitted = append(admitted, got.At.Add(got.Delay))
			}
		}
	})
}
