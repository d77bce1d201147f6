package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The concurrent cases run goroutines goroutines of calls calls each,
// calls chosen so that a case takes about concurrencyBudget on the store
// (see calibrate), between minCalls and maxCalls: a fast store is
// hammered harder, a slow one (an interpreter behind one lock, the race
// detector, a loaded machine) still sees 16 goroutines at once, for long
// enough to admit a quota of 32 exactly.
const (
	goroutines        = 16
	minCalls          = 8
	maxCalls          = 200
	concurrencyBudget = 40 * time.Millisecond
)

// calibrate returns the calls per goroutine of the concurrent cases on s,
// from the time goroutines goroutines take to make a few decisions at
// once.
func calibrate(t *testing.T, s *store) int {
	t.Helper()
	p := s.pair(t, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1000})
	ctx := context.Background()
	const perGoroutine = 4
	if _, err := p.lim.Allow(ctx, "calibrate"); err != nil {
		t.Fatalf("Allow: %v", err)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perGoroutine {
				_, _ = p.lim.Allow(ctx, "calibrate")
			}
		}()
	}
	wg.Wait()
	per := time.Since(start) / (goroutines * perGoroutine) // the store's time per decision, under contention
	calls := maxCalls
	if per > 0 {
		calls = int(min(int64(concurrencyBudget/(goroutines*per)), maxCalls))
	}
	return max(calls, minCalls)
}

// tally is what a hammer saw on one key.
type tally struct {
	admitted   int64       // units
	byLimiter  []int64     // units, per limiter
	remaining  []int64     // Remaining of each admission
	departures []time.Time // At+Delay of each admission (the frozen instant+Delay on routes without At)
}

// hammer runs goroutines goroutines of calls calls of req on keys (goroutine
// g starts at key g and moves to the next key at each call), goroutine g
// through the limiter ps[g%len(ps)], each call by the next of rs. frozen
// is the instant of a frozen clock, or zero. It fails t on any error or
// decision that breaks the invariants of floodgate.Decision, and returns
// the tallies by key.
func hammer(t *testing.T, ps []pair, keys []string, req floodgate.Request, rs []route, calls int, frozen time.Time) map[string]*tally {
	t.Helper()
	tallies := map[string]*tally{}
	for _, k := range keys {
		tallies[k] = &tally{byLimiter: make([]int64, len(ps))}
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		errs  = make(chan error, goroutines)
		start = make(chan struct{})
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			li := g % len(ps)
			p := ps[li]
			policy := p.alg.Policy()
			<-start
			for c := range calls {
				key := keys[(g+c)%len(keys)]
				r := rs[(g+c)%len(rs)]
				res, err := p.do(context.Background(), r, key, req)
				if err != nil {
					errs <- fmt.Errorf("%v %v %s: %w", p.alg, r, opString(req, t0), err)
					return
				}
				if err := checkDecision(policy, res.Decision); err != nil {
					errs <- fmt.Errorf("%v %v %s = %+v: %w", p.alg, r, opString(req, t0), res.Decision, err)
					return
				}
				if !res.Allowed {
					continue
				}
				granted := req.N
				if r.full() {
					granted = res.Granted
				}
				at := frozen
				if r.full() {
					at = res.At
				}
				mu.Lock()
				tl := tallies[key]
				tl.admitted += granted
				tl.byLimiter[li] += granted
				tl.remaining = append(tl.remaining, res.Remaining)
				tl.departures = append(tl.departures, at.Add(res.Delay))
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return tallies
}

// exactly checks that an exact algorithm's admissions on one key were
// linearized: quota units in all, and (for single units) each Remaining
// from quota-1 down to 0 seen once.
func exactly(key string, tl *tally, quota int64, singles bool) error {
	if tl.admitted != quota {
		return fmt.Errorf("%s: admitted %d units, want exactly %d", key, tl.admitted, quota)
	}
	if !singles {
		return nil
	}
	rem := slices.Clone(tl.remaining)
	slices.Sort(rem)
	for i, r := range rem {
		if r != int64(i) {
			return fmt.Errorf("%s: the admissions reported Remaining %v, want each of 0 to %d once: two decisions saw the same state", key, rem, quota-1)
		}
	}
	return nil
}

// distinct checks that no two admissions on a leaky bucket got the same
// departure slot.
func distinct(key string, tl *tally) error {
	seen := map[int64]bool{}
	for _, d := range tl.departures {
		if seen[d.UnixNano()] {
			return fmt.Errorf("%s: two admissions got the departure slot %v", key, d)
		}
		seen[d.UnixNano()] = true
	}
	return nil
}

// concurrentCase is one algorithm hammered on a frozen clock: quota q is a
// quarter of the calls, so most calls are denied.
type concurrentCase struct {
	name   string
	alg    func(q int64) floodgate.Algorithm
	req    floodgate.Request
	want   func(q int64) int64 // units admitted per key
	atMost bool                // the sliding window's estimate: at most want, and some
	queued bool                // leaky bucket reservations: distinct slots
}

func hour(alg func(q int64, w time.Duration) floodgate.Algorithm) func(int64) floodgate.Algorithm {
	return func(q int64) floodgate.Algorithm { return alg(q, time.Hour) }
}

var (
	tbHour = func(q int64, per time.Duration) floodgate.Algorithm {
		return floodgate.TokenBucket{Rate: 1, Per: per, Burst: q}
	}
	lbHour = func(q int64, per time.Duration) floodgate.Algorithm {
		return floodgate.LeakyBucket{Rate: 1, Per: per, Capacity: q}
	}
	fwHour = func(q int64, w time.Duration) floodgate.Algorithm { return floodgate.FixedWindow{Limit: q, Window: w} }
	swHour = func(q int64, w time.Duration) floodgate.Algorithm {
		return floodgate.SlidingWindow{Limit: q, Window: w}
	}
	slHour = func(q int64, w time.Duration) floodgate.Algorithm { return floodgate.SlidingLog{Limit: q, Window: w} }
	all    = func(q int64) int64 { return q }
)

// concurrentCases are the algorithms the concurrent cases hammer. Windows
// and refills are an hour long, so that a real server's TTLs outlive the
// case and the store's own clock moves nothing during it.
var concurrentCases = []concurrentCase{
	{name: "TokenBucket", alg: hour(tbHour), req: take(1), want: all},
	{name: "TokenBucket/upTo", alg: hour(tbHour), req: upTo(3), want: all},
	// AllowN never queues: one admission, then the queue is busy for an hour.
	{name: "LeakyBucket", alg: hour(lbHour), req: take(1), want: func(int64) int64 { return 1 }},
	{name: "LeakyBucket/reserve", alg: hour(lbHour), req: reserve(1, floodgate.MaxDelay), want: all, queued: true},
	{name: "FixedWindow", alg: hour(fwHour), req: take(1), want: all},
	{name: "SlidingWindow", alg: hour(swHour), req: take(1), want: all, atMost: true},
	{name: "SlidingLog", alg: hour(slHour), req: take(1), want: all},
	// Limits: exactly the smaller quota, whichever limit has it.
	{name: "Limits/TokenBucket+FixedWindow", alg: func(q int64) floodgate.Algorithm {
		return floodgate.Limits{tbHour(q, time.Hour), fwHour(2*q, time.Hour)}
	}, req: take(1), want: all},
	{name: "Limits/FixedWindow+SlidingLog", alg: func(q int64) floodgate.Algorithm {
		return floodgate.Limits{fwHour(2*q, time.Hour), slHour(q, time.Hour)}
	}, req: take(1), want: all},
	{name: "Limits/two token buckets", alg: func(q int64) floodgate.Algorithm {
		return floodgate.Limits{tbHour(3*q, time.Minute), tbHour(q, time.Hour)}
	}, req: take(1), want: all},
	{name: "Limits/upTo", alg: func(q int64) floodgate.Algorithm {
		return floodgate.Limits{slHour(2*q, time.Hour), tbHour(q, time.Hour)}
	}, req: upTo(3), want: all},
}

// check checks the tallies of a concurrent case whose limiter's quota is
// q; linear says whether one limiter made every decision, so that the
// admissions' Remaining count down one by one.
func (c concurrentCase) check(tallies map[string]*tally, q int64, linear bool) error {
	want := c.want(q)
	var errs []error
	for key, tl := range tallies {
		switch {
		case c.atMost:
			if tl.admitted > want || tl.admitted <= 0 {
				errs = append(errs, fmt.Errorf("%s: admitted %d units, want 1 to %d", key, tl.admitted, want))
			}
		default:
			errs = append(errs, exactly(key, tl, want, linear && c.req.N == 1 && want == q))
		}
		if c.queued {
			errs = append(errs, distinct(key, tl))
		}
	}
	return errors.Join(errs...)
}

// runConcurrent hammers one key, many keys, and one key under two
// configurations, from many goroutines on a frozen virtual clock, and
// requires exact totals (for the sliding window counter: at most the
// quota). The calls alternate between the routes into the store, so that
// a store's Take and Apply are atomic with each other too.
func (h *harness) runConcurrent(t *testing.T) {
	frozen := t0.Add(30 * time.Minute)
	calls := calibrate(t, h.open(t, NewClock(frozen).Now))
	total := int64(goroutines * calls)
	t.Logf("%d goroutines × %d calls", goroutines, calls)
	t.Run("OneKey", func(t *testing.T) {
		for _, c := range concurrentCases {
			t.Run(c.name, func(t *testing.T) {
				s := h.open(t, NewClock(frozen).Now)
				q := total / 4
				p := s.pair(t, c.alg(q))
				if err := c.check(hammer(t, []pair{p}, []string{"hot"}, c.req, routes(c.req), calls, frozen), q, true); err != nil {
					t.Error(err)
				}
			})
		}
	})
	t.Run("ManyKeys", func(t *testing.T) {
		const nkeys = 8
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("key%d", i)
		}
		for _, c := range concurrentCases {
			if c.req.Op != floodgate.OpTake || c.name == "LeakyBucket" {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				s := h.open(t, NewClock(frozen).Now)
				q := max(total/(4*nkeys), 1)
				p := s.pair(t, c.alg(q))
				if err := c.check(hammer(t, []pair{p}, keys, c.req, routes(c.req), calls, frozen), q, true); err != nil {
					t.Error(err)
				}
			})
		}
	})
	// Two configurations of one kind on one key, half the goroutines each:
	// the larger quota 2q ends up spent exactly, and the smaller never
	// admits beyond q. A store that keeps a state per configuration
	// admits 3q.
	t.Run("TwoConfigurations", func(t *testing.T) {
		for _, c := range concurrentCases {
			if c.req.Op != floodgate.OpTake || c.name == "LeakyBucket" {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				s := h.open(t, NewClock(frozen).Now)
				q := max(total/8, 1)
				ps := []pair{s.pair(t, c.alg(q)), s.pair(t, c.alg(2*q))}
				tallies := hammer(t, ps, []string{"hot"}, c.req, routes(c.req), calls, frozen)
				if got := tallies["hot"].byLimiter[0]; got > q {
					t.Errorf("the limiter of quota %d admitted %d units on a key it shares", q, got)
				}
				if err := c.check(tallies, 2*q, false); err != nil {
					t.Error(err)
				}
			})
		}
	})
}
