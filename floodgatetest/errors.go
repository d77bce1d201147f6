package floodgatetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// runErrors checks that bad arguments give errors matching the sentinels
// of package floodgate, and no panic: through a Limiter, and where they
// reach the store without one (a Bound's Apply and Take make the checks a
// Limiter makes, and Bind or Apply refuse an unusable configuration).
func (h *harness) runErrors(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	ctx := context.Background()
	good := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2}
	long := strings.Repeat("k", floodgate.MaxKeyLen+1)
	t.Run("Bound", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			key  string
			alg  floodgate.Algorithm
			req  floodgate.Request
			want error
		}{
			{"empty key", "", good, take(1), floodgate.ErrEmptyKey},
			{"long key", long, good, take(1), floodgate.ErrKeyTooLong},
			{"n zero", "k", good, take(0), floodgate.ErrInvalidN},
			{"n negative", "k", good, take(-3), floodgate.ErrInvalidN},
			{"n over burst", "k", good, take(3), floodgate.ErrExceedsLimit},
			{"take up to n zero", "k", good, upTo(0), floodgate.ErrInvalidN},
			{"refund n zero", "k", good, floodgate.Request{Op: floodgate.OpSettle, At: t0}, floodgate.ErrInvalidN},
			{"negative delay", "k", good, reserve(1, -time.Second), floodgate.ErrInvalidDelay},
			{"zero rate", "k", floodgate.TokenBucket{Per: time.Second, Burst: 1}, take(1), floodgate.ErrInvalidConfig},
			{"zero burst", "k", floodgate.TokenBucket{Rate: 1, Per: time.Second}, take(1), floodgate.ErrInvalidConfig},
			{"negative capacity", "k", floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: -1}, take(1), floodgate.ErrInvalidConfig},
			{"zero window", "k", floodgate.FixedWindow{Limit: 1}, take(1), floodgate.ErrInvalidConfig},
			{"sub-microsecond window", "k", floodgate.SlidingWindow{Limit: 1, Window: 1500}, take(1), floodgate.ErrInvalidConfig},
			{"zero limit", "k", floodgate.SlidingLog{Window: time.Second}, take(1), floodgate.ErrInvalidConfig},
			{"n over limit", "k", floodgate.SlidingLog{Limit: 2, Window: time.Second}, take(3), floodgate.ErrExceedsLimit},
			{"n over capacity", "k", floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 2}, reserve(3, time.Hour), floodgate.ErrExceedsLimit},
			{"unknown op", "k", good, floodgate.Request{Op: 99, N: 1}, floodgate.ErrInvalidConfig},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b, err := s.Bind(name, tc.alg)
				if err == nil {
					_, err = b.Apply(ctx, tc.key, tc.req, nil)
				}
				if !errors.Is(err, tc.want) {
					t.Errorf("Bind(%q, %v), Apply(%.20q, %s) = %v, want an error matching %v", name, tc.alg, tc.key, opString(tc.req, t0), err, tc.want)
				}
				if b == nil || tc.req.Op != floodgate.OpTake || tc.req.MaxDelay != 0 || errors.Is(tc.want, floodgate.ErrInvalidConfig) {
					return
				}
				_, err = b.Take(ctx, tc.key, tc.req.N)
				if !errors.Is(err, tc.want) {
					t.Errorf("Bind(%v), Take(%.20q, %d) = %v, want an error matching %v", tc.alg, tc.key, tc.req.N, err, tc.want)
				}
			})
		}
	})
	t.Run("Limiter", func(t *testing.T) {
		lim := s.limiter(t, name, good)
		for _, tc := range []struct {
			name string
			call func() error
			want error
		}{
			{"Allow empty key", func() error { _, err := lim.Allow(ctx, ""); return err }, floodgate.ErrEmptyKey},
			{"AllowN long key", func() error { _, err := lim.AllowN(ctx, long, 1); return err }, floodgate.ErrKeyTooLong},
			{"AllowN n zero", func() error { _, err := lim.AllowN(ctx, "k", 0); return err }, floodgate.ErrInvalidN},
			{"AllowN n over burst", func() error { _, err := lim.AllowN(ctx, "k", 3); return err }, floodgate.ErrExceedsLimit},
			{"Reserve negative delay", func() error { _, err := lim.Reserve(ctx, "k", 1, -1); return err }, floodgate.ErrInvalidDelay},
			{"Wait n over burst", func() error { return lim.Wait(ctx, "k", 3) }, floodgate.ErrExceedsLimit},
			{"Apply unknown op", func() error { _, err := lim.Apply(ctx, "k", floodgate.Request{Op: 99, N: 1}, nil); return err }, floodgate.ErrInvalidConfig},
			{"New invalid configuration", func() error {
				_, err := floodgate.New(s.Store, floodgate.FixedWindow{Limit: 1}, nil)
				return err
			}, floodgate.ErrInvalidConfig},
			{"New invalid name", func() error {
				_, err := floodgate.New(s.Store, good, &floodgate.Options{Name: "a{b}"})
				return err
			}, floodgate.ErrInvalidConfig},
			{"Bind invalid name", func() error {
				_, err := s.Bind("", good)
				return err
			}, floodgate.ErrInvalidConfig},
		} {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want an error matching %v", tc.name, err, tc.want)
			}
		}
		// An ended context is an error of Reserve, Wait and Apply, before
		// the store is asked. (Allow and AllowN leave ctx to the store: an
		// in-process one may decide without looking at it.)
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := lim.Reserve(done, "k", 1, time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("Reserve(cancelled ctx) = %v, want context.Canceled", err)
		}
		if err := lim.Wait(done, "k", 1); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(cancelled ctx) = %v, want context.Canceled", err)
		}
		if _, err := lim.Apply(done, "k", upTo(1), nil); !errors.Is(err, context.Canceled) {
			t.Errorf("Apply(cancelled ctx) = %v, want context.Canceled", err)
		}
	})
	// A clock outside 1970 to 2255 is refused, never wrapped around.
	t.Run("Clock", func(t *testing.T) {
		for _, at := range []time.Time{time.Unix(-1, 0), time.Date(2256, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
			clock.Set(at)
			for _, alg := range fiveAlgorithms() {
				p := s.pair(t, alg)
				for _, r := range []route{viaAllowN, viaLimiterApply} {
					if _, err := p.do(ctx, r, "clock", take(1)); !errors.Is(err, floodgate.ErrInvalidConfig) {
						t.Errorf("%v: %v at %v = %v, want an error matching ErrInvalidConfig", alg, r, at, err)
					}
				}
			}
		}
	})
}

// fiveAlgorithms returns one configuration of each kind, with a quota of 3
// and a second's window.
func fiveAlgorithms() []floodgate.Algorithm {
	return []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 3},
		floodgate.LeakyBucket{Rate: 3, Per: time.Second, Capacity: 3},
		floodgate.FixedWindow{Limit: 3, Window: time.Second},
		floodgate.SlidingWindow{Limit: 3, Window: time.Second},
		floodgate.SlidingLog{Limit: 3, Window: time.Second},
	}
}
