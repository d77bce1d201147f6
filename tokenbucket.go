package floodgate

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/internal/take"
)

// TokenBucket admits up to Burst units at once and refills at Rate units per
// Per. It is the usual choice for APIs: it allows short bursts and enforces
// a long-run rate.
//
// The state is one word, the theoretical arrival time of GCRA (the Generic
// Cell Rate Algorithm of ITU-T I.371): the instant at which the bucket would
// be full again. The emission interval Per/Rate is rounded up to a whole
// nanosecond, so the enforced rate is exact when Per is a multiple of Rate
// nanoseconds (100 per second, 1000 per minute) and otherwise lower by less
// than one nanosecond per unit (3 per second: 1 part in 10^9).
//
// Reserve may take units before they have refilled, putting the bucket in
// debt for up to maxDelay, as golang.org/x/time/rate does; later requests
// wait until the debt is repaid.
//
// The zero value is not usable; TokenBucket is a plain value, safe to copy
// and to share.
type TokenBucket struct {
	// Rate is the number of units restored per Per; at least 1.
	Rate int64
	// Per is the period of Rate; at least Rate nanoseconds.
	Per time.Duration
	// Burst is the bucket size: the most units admitted at once; at least
	// 1. Burst/Rate·Per must be at most MaxWindow.
	Burst int64
}

var _ Algorithm = TokenBucket{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a TokenBucket) Validate() error {
	_, _, err := emission(a.Rate, a.Per, a.Burst, "Burst")
	return err
}

// Policy returns Burst units restored in Burst/Rate·Per.
func (a TokenBucket) Policy() Policy {
	_, tau, err := emission(a.Rate, a.Per, a.Burst, "Burst")
	if err != nil {
		return Policy{}
	}
	return Policy{Quota: a.Burst, Window: time.Duration(tau)}
}

// Kind returns KindTokenBucket.
func (a TokenBucket) Kind() Kind { return KindTokenBucket }

// Step is the reference transition of the token bucket. tat is the stored
// theoretical arrival time in nanoseconds since the Unix epoch (0 for a new
// key); Step returns the new value to store and the result. A denial returns
// tat unchanged. Every Store must produce the same results.
func (a TokenBucket) Step(tat int64, now time.Time, req Request) (int64, Result, error) {
	// The fast paths inline; the slow ones build the errors.
	interval, tau, ok := emissionFast(a.Rate, a.Per, a.Burst)
	if !ok {
		var err error
		if interval, tau, err = emissionSlow(a.Rate, a.Per, a.Burst, "Burst"); err != nil {
			return tat, Result{}, err
		}
	}
	if !okStep(req, a.Burst, now.Unix()) {
		return tat, Result{}, badStep(req, a.Burst, now)
	}
	t := now.UnixNano()
	if req.Op == OpTake {
		next, remaining, wait, reset, ok := take.Bucket(tat, t, req.N, interval, tau, maxDelayNs(req))
		if !ok {
			return tat, Result{At: now, Decision: Decision{
				Limit:      a.Burst,
				Remaining:  remaining,
				RetryAfter: time.Duration(wait),
				ResetAfter: time.Duration(reset),
			}}, nil
		}
		return next, Result{At: now, Granted: req.N, Decision: Decision{
			Allowed:    true,
			Limit:      a.Burst,
			Remaining:  remaining,
			Delay:      time.Duration(wait),
			ResetAfter: time.Duration(reset),
		}}, nil
	}
	base := max(tat, t)
	res := Result{At: now, Decision: Decision{Limit: a.Burst}}
	// tokens reports the whole units in the bucket when the schedule ends at
	// end; negative in debt.
	tokens := func(end int64) int64 { return floorDiv(t+tau-end, interval) }
	switch req.Op {
	case OpTakeUpTo:
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
	default: // OpRefund
		// Only units whose tokens have not refilled yet can come back.
		back := min(req.N, max(ceilDiv(tat-t, interval), 0))
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

// ceilDiv returns ⌈a/b⌉ for b > 0.
func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// String describes the configuration, e.g. "TokenBucket{100 per 1s, burst 200}".
func (a TokenBucket) String() string {
	return fmt.Sprintf("TokenBucket{%d per %v, burst %d}", a.Rate, a.Per, a.Burst)
}
