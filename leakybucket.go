package floodgate

import (
	"fmt"
	"time"
)

// LeakyBucket shapes traffic to a constant rate: admitted requests leave a
// FIFO queue exactly n·Per/Rate apart, so no burst ever passes, and the queue
// holds at most Capacity units of work. Use it in front of a dependency that
// must see an even rate (a payment provider, a database batch job).
//
// A request departs at max(now, tail), where tail is the departure slot after
// the last admitted request, and moves the tail to that instant plus n·Per/Rate.
// It is admitted when the work queued ahead of it plus its own cost fits in
// the bucket: max(0, tail−now)·Rate/Per + n ≤ Capacity. Decision.Delay is the
// time until its departure. AllowN admits only requests that depart at once;
// Reserve and Wait queue. The emission interval is rounded up to a whole
// nanosecond, as for TokenBucket.
//
// Units cannot be refunded: a departure slot, once given, fixes the slots of
// the requests behind it.
//
// The zero value is not usable; LeakyBucket is a plain value, safe to copy
// and to share.
type LeakyBucket struct {
	// Rate is the number of units that depart per Per; at least 1.
	Rate int64
	// Per is the period of Rate; at least Rate nanoseconds.
	Per time.Duration
	// Capacity is the most units of work the queue holds, including the
	// request being admitted; at least 1. Capacity/Rate·Per must be at most
	// MaxWindow.
	Capacity int64
}

var _ Algorithm = LeakyBucket{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a LeakyBucket) Validate() error {
	_, _, err := emission(a.Rate, a.Per, a.Capacity, "Capacity")
	return err
}

// Policy returns Capacity units drained in Capacity/Rate·Per.
func (a LeakyBucket) Policy() Policy {
	_, tau, err := emission(a.Rate, a.Per, a.Capacity, "Capacity")
	if err != nil {
		return Policy{}
	}
	return Policy{Quota: a.Capacity, Window: time.Duration(tau)}
}

// Kind returns KindLeakyBucket.
func (a LeakyBucket) Kind() Kind { return KindLeakyBucket }

// Step is the reference transition of the leaky bucket. tail is the stored
// next departure slot in nanoseconds since the Unix epoch (0 for a new key);
// Step returns the new value to store and the result. A denial returns tail
// unchanged. Every Store must produce the same results.
func (a LeakyBucket) Step(tail int64, now time.Time, req Request) (int64, Result, error) {
	// The fast paths inline; the slow ones build the errors.
	interval, tau, ok := emissionFast(a.Rate, a.Per, a.Capacity)
	if !ok {
		var err error
		if interval, tau, err = emissionSlow(a.Rate, a.Per, a.Capacity, "Capacity"); err != nil {
			return tail, Result{}, err
		}
	}
	if !okStep(req, a.Capacity, now.Unix()) {
		return tail, Result{}, badStep(req, a.Capacity, now)
	}
	t := now.UnixNano()
	res := Result{At: now, Decision: Decision{Limit: a.Capacity}}
	base := max(tail, t) // this request's departure
	free := func(end int64) int64 { return max(floorDiv(t+tau-end, interval), 0) }
	switch req.Op {
	case OpTake:
		next := base + req.N*interval
		if next-t > tau || base-t > maxDelayNs(req) {
			// The earliest instant at which both the capacity and the delay
			// bound hold; it is at most tail, since n ≤ Capacity.
			retry := max(next-tau, base-maxDelayNs(req))
			res.Remaining = free(base)
			res.RetryAfter = time.Duration(retry - t)
			res.ResetAfter = nsDur(base - t)
			return tail, res, nil
		}
		res.Allowed, res.Granted = true, req.N
		res.Delay = nsDur(base - t)
		res.Remaining = free(next)
		res.ResetAfter = nsDur(next - t)
		return next, res, nil
	case OpTakeUpTo:
		res.Remaining = free(base)
		res.ResetAfter = nsDur(base - t)
		if base > t { // a queue is waiting: nothing departs at once
			res.RetryAfter = time.Duration(base - t)
			return tail, res, nil
		}
		m := min(req.N, a.Capacity)
		next := t + m*interval
		res.Allowed, res.Granted = true, m
		res.Remaining = free(next)
		res.ResetAfter = nsDur(next - t)
		return next, res, nil
	default: // OpRefund: departure slots are promised; nothing comes back.
		res.Remaining = free(base)
		res.ResetAfter = nsDur(base - t)
		return tail, res, nil
	}
}

// String describes the configuration, e.g. "LeakyBucket{10 per 1s, capacity 50}".
func (a LeakyBucket) String() string {
	return fmt.Sprintf("LeakyBucket{%d per %v, capacity %d}", a.Rate, a.Per, a.Capacity)
}
