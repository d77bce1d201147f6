package step

import (
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/take"
	"github.com/floodgate-go/floodgate/internal/timemath"
)

// TokenBucket is the reference transition of the token bucket. tat is the stored
// theoretical arrival time in nanoseconds since the Unix epoch (0 for a new
// key); it returns the new value to store and the result. A denial returns
// tat unchanged. Every Store must produce the same results.
func TokenBucket(a floodgate.TokenBucket, tat int64, now time.Time, req floodgate.Request) (int64, floodgate.Result, error) {
	// The fast paths inline; the slow ones build the errors.
	interval, tau, ok := timemath.EmissionFast(a.Rate, a.Per, a.Burst)
	if !ok {
		if interval, tau, ok = timemath.Emission(a.Rate, a.Per, a.Burst); !ok {
			return tat, floodgate.Result{}, a.Validate()
		}
	}
	if err := checkStep(req, a.Burst, now); err != nil {
		return tat, floodgate.Result{}, err
	}
	t := now.UnixNano()
	if req.Op == floodgate.OpTake {
		next, remaining, wait, reset, ok := take.Bucket(tat, t, req.N, interval, tau, maxDelayNs(req))
		if !ok {
			return tat, floodgate.Result{At: now, Decision: floodgate.Decision{
				Limit:      a.Burst,
				Remaining:  remaining,
				RetryAfter: time.Duration(wait),
				ResetAfter: time.Duration(reset),
			}}, nil
		}
		return next, floodgate.Result{At: now, Granted: req.N, Decision: floodgate.Decision{
			Allowed:    true,
			Limit:      a.Burst,
			Remaining:  remaining,
			Delay:      time.Duration(wait),
			ResetAfter: time.Duration(reset),
		}}, nil
	}
	base := max(tat, t)
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Burst}}
	// tokens reports the whole units in the bucket when the schedule ends at
	// end; negative in debt.
	tokens := func(end int64) int64 { return timemath.FloorDiv(t+tau-end, interval) }
	switch req.Op {
	case floodgate.OpTakeUpTo:
		m := min(req.N, max(tokens(base), 0))
		next := base + m*interval
		res.Remaining = max(tokens(next), 0)
		res.ResetAfter = nsDur(next - t)
		if m == 0 {
			res.RetryAfter = time.Duration(base + interval - tau - t)
			return tat, res, nil
		}
		res.Allowed, res.Granted = true, m
		return next, res, nil
	default: // floodgate.OpSettle
		if req.N > 0 {
			// A charge, into debt of at most one more bucket: the
			// schedule ends at most 2·tau after now.
			m := min(req.N, max(timemath.FloorDiv(t+2*tau-base, interval), 0))
			next := base + m*interval
			if m == 0 {
				next = tat
			}
			res.Allowed, res.Granted = m > 0, m
			res.Remaining = max(tokens(max(next, t)), 0)
			res.ResetAfter = nsDur(next - t)
			return next, res, nil
		}
		// Only units whose tokens have not refilled yet can come back.
		back := min(settleBack(req.N), max(timemath.CeilDiv(tat-t, interval), 0))
		next := max(tat-back*interval, t)
		if back == 0 {
			next = tat
		}
		res.Allowed, res.Granted = back > 0, back
		res.Remaining = max(tokens(max(next, t)), 0)
		res.ResetAfter = nsDur(next - t)
		return next, res, nil
	}
}
