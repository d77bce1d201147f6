package fgotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// newLimiter returns a limiter of alg on a memstore with the clock now
// (nil: the real one).
func newLimiter(t testing.TB, alg floodgate.Algorithm, now func() time.Time) floodgate.Limiter {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, alg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestWrapEndToEnd drives limiters built by floodgate.New on memstore
// through observe.Wrap, timing every decision, and checks what the
// instruments say against what the limiters answered.
func TestWrapEndToEnd(t *testing.T) {
	m, r := newMetrics(t, nil)
	o := m.Observer()
	o.LatencyEvery = 1
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	clock := func() time.Time { return now }
	wrap := func(name string, alg floodgate.Algorithm) floodgate.Limiter {
		t.Helper()
		w, err := observe.Wrap(newLimiter(t, alg, clock), name, o)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	api := wrap("api", floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 2})
	plan := wrap("plan", floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 2, Window: time.Minute},
	})
	shaper := wrap("shaper", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1})
	ctx := context.Background()

	var allowed, denied int
	count := func(d floodgate.Decision, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	for range 3 {
		count(api.Allow(ctx, "alice")) // 2 admitted, 1 denied
	}
	count(api.AllowN(ctx, "bob", 2)) // admitted: 2 units
	if _, err := api.AllowN(ctx, "", 1); !errors.Is(err, floodgate.ErrEmptyKey) {
		t.Fatalf("AllowN(\"\") error = %v, want ErrEmptyKey", err)
	}
	if _, err := api.AllowN(ctx, "carol", 3); !errors.Is(err, floodgate.ErrExceedsLimit) {
		t.Fatalf("AllowN(3) over a burst of 2: error = %v, want ErrExceedsLimit", err)
	}
	for range 3 {
		count(plan.Allow(ctx, "dave")) // the fixed window (limit 2) denies the third
	}
	count(shaper.Allow(ctx, "erin"))                     // admitted now
	count(shaper.Reserve(ctx, "erin", 1, 2*time.Second)) // admitted in 1s
	if allowed != 7 || denied != 2 {
		t.Fatalf("limiters admitted %d and denied %d, want 7 and 2", allowed, denied)
	}

	got := collect(t, r)
	take := func(name, res string, kv ...string) string {
		return attrs(append([]string{limiter, name, result, res, op, "take"}, kv...)...)
	}
	wantRequests := map[string]int64{
		take("api", "allowed"):                         3,
		take("api", "denied"):                          1,
		take("api", "error", errType, "empty_key"):     1,
		take("api", "error", errType, "exceeds_limit"): 1,
		take("plan", "allowed"):                        2,
		take("plan", "denied", binding, "1"):           1,
		take("shaper", "allowed"):                      2,
	}
	equal(t, "requests", values(got["floodgate.rate_limiting.requests"]), wantRequests)
	equal(t, "units", values(got["floodgate.rate_limiting.units"]), map[string]int64{
		take("api", "allowed"):                         4,
		take("api", "denied"):                          1,
		take("api", "error", errType, "empty_key"):     1,
		take("api", "error", errType, "exceeds_limit"): 3,
		take("plan", "allowed"):                        2,
		take("plan", "denied", binding, "1"):           1,
		take("shaper", "allowed"):                      2,
	})
	// Every decision was timed (LatencyEvery 1): the histogram counts
	// them all, under the same attributes as the counter.
	wantCounts := map[string]uint64{}
	for k, v := range wantRequests {
		wantCounts[k] = uint64(v)
	}
	equal(t, "decision.duration count", counts(got["floodgate.rate_limiting.decision.duration"]), wantCounts)
	queue := got["floodgate.rate_limiting.request.time_in_queue"]
	equal(t, "time_in_queue count", counts(queue), map[string]uint64{take("shaper", "allowed"): 1})
	if p := queue.points[take("shaper", "allowed")]; p.sum != 1 {
		t.Errorf("time_in_queue sum = %v, want 1 (the reservation's delay)", p.sum)
	}
}
