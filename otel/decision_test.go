package fgotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// Attribute names, as the wanted points spell them.
const (
	limiter  = "floodgate.limiter.name"
	result   = "floodgate.rate_limiting.result"
	op       = "floodgate.rate_limiting.op"
	check    = "floodgate.rate_limiting.check"
	binding  = "floodgate.rate_limiting.binding"
	errType  = "error.type"
	storeKey = "floodgate.store.name"
)

func TestDecisionEvents(t *testing.T) {
	m, r := newMetrics(t, nil)
	on := m.Observer().OnDecision
	ctx := context.Background()
	unavailable := fmt.Errorf("redisstore: %w: %w", floodgate.ErrUnavailable, context.DeadlineExceeded)
	for _, d := range []observe.Decision{
		{Name: "api", Key: "alice", N: 1, Outcome: observe.Allowed, Latency: 20 * time.Microsecond,
			Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}},
		{Name: "api", Key: "bob", N: 3, Outcome: observe.Allowed, Latency: 40 * time.Microsecond,
			Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 6, Delay: 250 * time.Millisecond}},
		{Name: "api", Key: "alice", N: 2, Outcome: observe.Denied,
			Decision: floodgate.Decision{Limit: 10, RetryAfter: time.Second}},
		{Name: "api", Key: "alice", N: 1, Outcome: observe.Failed, Err: unavailable, Latency: 20 * time.Millisecond},
		{Name: "api", Key: "alice", N: -2, Op: floodgate.OpSettle, Outcome: observe.Allowed,
			Decision: floodgate.Decision{Allowed: true}},
		{Name: "api", Key: "alice", N: 1, Check: true, Outcome: observe.Denied,
			Decision: floodgate.Decision{Limit: 10, RetryAfter: time.Second}},
		{Name: "plan", Key: "carol", N: 1, Limits: 2, Outcome: observe.Denied,
			Decision: floodgate.Decision{Limit: 2, RetryAfter: time.Minute, Binding: 1}},
		{Name: "plan", Key: "carol", N: 1, Limits: 2, Outcome: observe.Allowed,
			Decision: floodgate.Decision{Allowed: true, Limit: 10, Remaining: 3, Binding: 0}},
		{Name: "lease-remote", Key: "k", N: 100, Op: floodgate.OpTakeUpTo, Outcome: observe.Allowed,
			Decision: floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 900}},
		{Name: "api", Key: "dave", N: 1, Wait: true, Outcome: observe.Denied, Err: floodgate.ErrWaitExceedsDeadline},
		{Name: "api", Key: "", N: 1, Outcome: observe.Failed, Err: floodgate.ErrEmptyKey},
		{Name: "api", Key: "x", N: 1, Outcome: observe.Failed, Err: errors.New("something else")},
	} {
		on(ctx, d)
	}
	got := collect(t, r)

	apiTake := func(res string, kv ...string) string {
		return attrs(append([]string{limiter, "api", result, res, op, "take"}, kv...)...)
	}
	wantRequests := map[string]int64{
		apiTake("allowed"):                                                  2,
		apiTake("denied"):                                                   2, // the plain denial and the Wait's deadline
		apiTake("error", errType, "unavailable"):                            1,
		apiTake("error", errType, "empty_key"):                              1,
		apiTake("error", errType, "_OTHER"):                                 1,
		apiTake("denied", check, "true"):                                    1,
		attrs(limiter, "api", result, "allowed", op, "settle"):              1,
		attrs(limiter, "plan", result, "denied", op, "take", binding, "1"):  1,
		attrs(limiter, "plan", result, "allowed", op, "take"):               1,
		attrs(limiter, "lease-remote", result, "allowed", op, "take_up_to"): 1,
	}
	equal(t, "requests", values(mustGet(t, got, "floodgate.rate_limiting.requests", "counter", "{request}")), wantRequests)

	wantUnits := map[string]int64{
		apiTake("allowed"):                                                  4,
		apiTake("denied"):                                                   3,
		apiTake("error", errType, "unavailable"):                            1,
		apiTake("error", errType, "empty_key"):                              1,
		apiTake("error", errType, "_OTHER"):                                 1,
		apiTake("denied", check, "true"):                                    1,
		attrs(limiter, "plan", result, "denied", op, "take", binding, "1"):  1,
		attrs(limiter, "plan", result, "allowed", op, "take"):               1,
		attrs(limiter, "lease-remote", result, "allowed", op, "take_up_to"): 100,
	}
	equal(t, "units", values(mustGet(t, got, "floodgate.rate_limiting.units", "counter", "{unit}")), wantUnits)

	dur := mustGet(t, got, "floodgate.rate_limiting.decision.duration", "histogram", "s")
	equal(t, "decision.duration count", counts(dur), map[string]uint64{
		apiTake("allowed"):                       2,
		apiTake("error", errType, "unavailable"): 1,
	})
	if p := dur.points[apiTake("allowed")]; math.Abs(p.sum-60e-6) > 1e-12 {
		t.Errorf("decision.duration{allowed} sum = %v, want 60e-6", p.sum)
	}
	if p := dur.points[apiTake("allowed")]; len(p.bounds) == 0 || p.bounds[0] != 10e-6 || p.bounds[len(p.bounds)-1] != 0.1 {
		t.Errorf("decision.duration bounds = %v, want 10µs to 100ms", p.bounds)
	}

	queue := mustGet(t, got, "floodgate.rate_limiting.request.time_in_queue", "histogram", "s")
	equal(t, "time_in_queue count", counts(queue), map[string]uint64{apiTake("allowed"): 1})
	if p := queue.points[apiTake("allowed")]; p.sum != 0.25 {
		t.Errorf("time_in_queue sum = %v, want 0.25", p.sum)
	}
}

// TestNoKeyInAttributes checks that no attribute of any point carries a
// key given to an event.
func TestNoKeyInAttributes(t *testing.T) {
	m, r := newMetrics(t, nil)
	everyEvent(m.Observer(), "secret-user-key")
	for name, in := range collect(t, r) {
		for k := range in.points {
			if strings.Contains(k, "secret-user-key") {
				t.Errorf("%s has a point {%s} carrying the key", name, k)
			}
		}
	}
}
