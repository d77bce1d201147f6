package floodgate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestLeakyBucketSpacing reserves many requests at one instant and checks
// that they depart exactly their cost in emission intervals apart, the first
// at once, so that no burst ever passes.
func TestLeakyBucketSpacing(t *testing.T) {
	for _, tc := range []struct {
		alg      floodgate.LeakyBucket
		interval time.Duration
	}{
		{floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 1000}, 100 * ms},
		{floodgate.LeakyBucket{Rate: 1, Per: time.Microsecond, Capacity: 1000}, time.Microsecond},
		// Per/Rate is not whole: the interval rounds up to a whole ns.
		{floodgate.LeakyBucket{Rate: 3, Per: time.Second, Capacity: 1000}, 333_333_334},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0.Add(17 * ms))
			l := newLimiter(t, tc.alg, clock)
			rng := rand.New(rand.NewPCG(1, 2))
			now := clock.Now()
			want := now // the next departure
			queued := int64(0)
			for i := 0; ; i++ {
				n := rng.Int64N(5) + 1
				d := reserveOK(t, l, "k", n, floodgate.MaxDelay)
				if queued+n > tc.alg.Capacity {
					require.False(t, d.Allowed, "request %d: Reserve(%d) with %d units queued = %+v, want denied: the queue holds %d", i, n, queued, d, tc.alg.Capacity)
					break
				}
				require.True(t, d.Allowed, "request %d: Reserve(%d) = %+v, want admitted", i, n, d)
				require.Equal(t, want, now.Add(d.Delay), "request %d: departs at +%v, want +%v", i, d.Delay, want.Sub(now))
				assert.Equal(t, tc.alg.Capacity-queued-n, d.Remaining, "request %d: Remaining", i)
				want = want.Add(time.Duration(n) * tc.interval)
				queued += n
				if i == 0 {
					// Nothing departs beside the first request: the queue is busy.
					d := decide(t, l, "other-"+fmt.Sprint(i), 1)
					require.True(t, d.Allowed)
					d = decide(t, l, "k", 1)
					require.False(t, d.Allowed, "AllowN(1) beside a departing request = %+v, want denied", d)
				}
			}
			// Later arrivals join the end of the queue as it drains.
			clock.Set(now.Add(5 * tc.interval))
			d := reserveOK(t, l, "k", 5, floodgate.MaxDelay)
			require.True(t, d.Allowed, "Reserve(5) after 5 departures = %+v, want admitted", d)
			assert.Equal(t, want, clock.Now().Add(d.Delay), "the late request departs at +%v, want +%v", clock.Now().Add(d.Delay).Sub(now), want.Sub(now))
		})
	}
}

// TestFixedWindowPassesTwiceTheLimitAcrossABoundary documents the fixed
// window's contract: Limit units at the end of one window and Limit more at
// the start of the next pass within a nanosecond. The sliding algorithms
// admit nothing more in the same trace.
func TestFixedWindowPassesTwiceTheLimitAcrossABoundary(t *testing.T) {
	const limit = 100
	for _, tc := range []struct {
		alg  floodgate.Algorithm
		want int64
	}{
		{floodgate.FixedWindow{Limit: limit, Window: time.Second}, 2 * limit},
		{floodgate.SlidingWindow{Limit: limit, Window: time.Second}, limit},
		{floodgate.SlidingLog{Limit: limit, Window: time.Second}, limit},
	} {
		t.Run(fmt.Sprint(tc.alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			l := newLimiter(t, tc.alg, clock)
			admitted := int64(0)
			// T0 is a window boundary.
			for _, at := range []time.Duration{time.Second - 1, time.Second} {
				clock.Set(t0.Add(at))
				for range limit {
					if decide(t, l, "k", 1).Allowed {
						admitted++
					}
				}
			}
			assert.Equal(t, tc.want, admitted, "units admitted within 1 ns across a window boundary")
		})
	}
}

// admission is units admitted for an instant (negative: given back).
type admission struct {
	at time.Time
	n  int64
}

// recordingStore records every admission and refund its Store makes, with
// the store's clock at the decision, which a Decision does not carry.
type recordingStore struct {
	floodgate.Store
	mu  sync.Mutex
	log []admission
}

func (s *recordingStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return &recordingBound{Bound: b, s: s}, nil
}

// recordingBound records the steps of its Bound in its store's log.
type recordingBound struct {
	floodgate.Bound
	s *recordingStore
}

func (b *recordingBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

func (b *recordingBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	s := b.s
	res, err := b.Bound.Apply(ctx, key, req, each)
	if err == nil && res.Granted > 0 {
		s.mu.Lock()
		if req.Op == floodgate.OpSettle {
			s.log = append(s.log, admission{at: req.At, n: -res.Granted})
		} else {
			s.log = append(s.log, admission{at: res.At.Add(res.Delay), n: res.Granted})
		}
		s.mu.Unlock()
	}
	return res, err
}

// maxInWindow returns the most units admitted within any half-open interval
// (x−w, x] and its end x. The maximum is attained at an admission instant.
func maxInWindow(log []admission, w time.Duration) (int64, time.Time) {
	log = slices.Clone(log)
	slices.SortFunc(log, func(a, b admission) int { return a.at.Compare(b.at) })
	var (
		best    int64
		bestEnd time.Time
		sum     int64
		lo      int
	)
	for hi, a := range log {
		sum += a.n
		for !log[lo].at.After(a.at.Add(-w)) {
			sum -= log[lo].n
			lo++
		}
		// Count the whole group of admissions at one instant together.
		if hi+1 < len(log) && log[hi+1].at.Equal(a.at) {
			continue
		}
		if sum > best {
			best, bestEnd = sum, a.at
		}
	}
	return best, bestEnd
}

// maxInFixedWindow returns the most units admitted within one epoch-aligned
// window of length w, and its start.
func maxInFixedWindow(log []admission, w time.Duration) (int64, time.Time) {
	sums := map[int64]int64{}
	for _, a := range log {
		sums[a.at.UnixNano()/int64(w)] += a.n
	}
	var (
		best  int64
		start int64
	)
	for k, v := range sums {
		if v > best {
			best, start = v, k
		}
	}
	return best, time.Unix(0, start*int64(w))
}

// TestSlidingLogNeverExceedsTheLimit drives one sliding log from many
// goroutines on a clock they move forward at random, with AllowN, Reserve,
// AllowUpTo and Refund of random cost, and checks that no window-long
// interval holds more than Limit admitted units. For the sliding window
// counter on the same trace it checks its weaker guarantee: no fixed window
// holds more than Limit units.
func TestSlidingLogNeverExceedsTheLimit(t *testing.T) {
	const (
		limit      = 20
		window     = 100 * ms
		goroutines = 16
		calls      = 1500
	)
	for _, alg := range []floodgate.Algorithm{
		floodgate.SlidingLog{Limit: limit, Window: window},
		floodgate.SlidingWindow{Limit: limit, Window: window},
	} {
		t.Run(fmt.Sprint(alg), func(t *testing.T) {
			clock := floodgatetest.NewClock(t0)
			inner, err := memstore.New(&memstore.Options{Now: clock.Now})
			require.NoError(t, err)
			rec := &recordingStore{Store: inner}
			lim, err := floodgate.New(rec, alg, nil)
			require.NoError(t, err)
			l := lim
			var (
				wg   sync.WaitGroup
				errs = make(chan error, goroutines)
			)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					ctx := context.Background()
					for range calls {
						if rng.IntN(4) == 0 {
							clock.Advance(time.Duration(rng.Int64N(int64(3 * ms))))
						}
						n := rng.Int64N(3) + 1
						var err error
						switch rng.IntN(8) {
						case 0, 1:
							_, err = l.Reserve(ctx, "k", n, time.Duration(rng.Int64N(int64(2*window))))
						case 2:
							_, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: n + 2}, nil)
						case 3:
							var res floodgate.Result
							if res, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTakeUpTo, N: n}, nil); err == nil && res.Allowed && rng.IntN(2) == 0 {
								_, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -(rng.Int64N(res.Granted) + 1), At: res.At.Add(res.Delay)}, nil)
							}
						default:
							_, err = l.AllowN(ctx, "k", n)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Greater(t, len(rec.log), 100, "too few admissions for a meaningful check")
			if _, ok := alg.(floodgate.SlidingLog); ok {
				most, end := maxInWindow(rec.log, window)
				assert.LessOrEqual(t, most, int64(limit), "%d units admitted in (T0+%v − %v, T0+%v], limit %d", most, end.Sub(t0), window, end.Sub(t0), limit)
			}
			most, start := maxInFixedWindow(rec.log, window)
			assert.LessOrEqual(t, most, int64(limit), "%d units admitted in the window starting at T0+%v, limit %d", most, start.Sub(t0), limit)
			t.Logf("%d admissions and refunds over %v", len(rec.log), clock.Now().Sub(t0))
		})
	}
}
