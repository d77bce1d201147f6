package step

import (
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/timemath"
)

// LeakyBucket is the reference transition of the leaky bucket. tail is the stored
// next departure slot in nanoseconds since the Unix epoch (0 for a new key);
// it returns the new value to store and the result. A denial returns tail
// unchanged. Every Store must produce the same results.
func LeakyBucket(a floodgate.LeakyBucket, tail int64, now time.Time, req floodgate.Request) (int64, floodgate.Result, error) {
	// The fast paths inline; the slow ones build the errors.
	interval, tau, ok := timemath.EmissionFast(a.Rate, a.Per, a.Capacity)
	if !ok {
		if interval, tau, ok = timemath.Emission(a.Rate, a.Per, a.Capacity); !ok {
			return tail, floodgate.Result{}, a.Validate()
		}
	}
	if err := checkStep(req, a.Capacity, now); err != nil {
		return tail, floodgate.Result{}, err
	}
	t := now.UnixNano()
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Capacity}}
	base := max(tail, t) // this request's departure
	free := func(end int64) int64 { return max(timemath.FloorDiv(t+tau-end, interval), 0) }
	switch req.Op {
	case floodgate.OpTake:
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
	case floodgate.OpTakeUpTo:
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
	default: // floodgate.OpSettle
		next := tail
		if req.N > 0 {
			// A charge queues behind the tail, up to 2·Capacity units of
			// queue in all.
			m := min(req.N, max(timemath.FloorDiv(t+2*tau-base, interval), 0))
			if m > 0 {
				next = base + m*interval
				res.Allowed, res.Granted = true, m
			}
		}
		// A give-back returns nothing: departure slots are promised.
		res.Remaining = free(max(next, t))
		res.ResetAfter = nsDur(next - t)
		return next, res, nil
	}
}
