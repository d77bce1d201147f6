package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Sample is one observation a Limiter hands to its Limit when a request ends
// with Token.Success or Token.Dropped. Token.Ignore produces no Sample.
type Sample struct {
	// Start is the instant the request was admitted.
	Start time.Time
	// RTT is the time from admission to the end of the request. It is never
	// negative: a clock that steps backwards yields an RTT of 0.
	RTT time.Duration
	// InFlight is the number of requests in flight right after this one was
	// admitted, itself included (the value captured at acquire, as Netflix's
	// AbstractLimiter does). Limits use it to tell an application-limited
	// server (few requests in flight) from a saturated one.
	InFlight int
	// Dropped reports a request that timed out or was refused by an overloaded
	// dependency. Loss-based limits (AIMD, and Gradient2 in this package) cut
	// the limit on it.
	Dropped bool
}

// Limit is an algorithm that estimates a concurrency limit from samples. It
// is the pluggable half of a Limiter (Netflix concurrency-limits splits the
// same way: Limit estimates, Limiter enforces).
//
// Contract for implementers:
//   - Current returns the limit to enforce before any sample; it is at least 1.
//   - Update folds one sample into the estimate and returns the limit to
//     enforce from now on (at least 1). It must not block, and it must not
//     call back into the Limiter, which holds its lock while calling it.
//   - The Limiter serializes all calls, so an implementation needs no locking
//     of its own as long as it is used by one Limiter. Every Limit in this
//     package relies on that: none is safe for concurrent use on its own, and
//     none may be shared between Limiters.
//   - Update must accept any Sample, including RTT 0, without panicking.
type Limit interface {
	// Current returns the current limit.
	Current() int
	// Update folds s into the estimate and returns the new limit.
	Update(s Sample) int
}

// lg is the log10-based scaling the reference implementation uses for Vegas's
// thresholds (Netflix Log10RootIntFunction): max(1, floor(log10(limit))).
// It is 1 below 100, 2 below 1000, and so on.
func lg(limit int) int {
	n := 0
	for ; limit >= 10; limit /= 10 {
		n++
	}
	return max(1, n)
}

// clampFloat returns x limited to [lo, hi].
func clampFloat(x, lo, hi float64) float64 {
	return math.Min(hi, math.Max(lo, x))
}

// validRatio reports whether x is a finite number in [lo, hi].
func validRatio(x, lo, hi float64) bool {
	return !math.IsNaN(x) && x >= lo && x <= hi
}

// invalid wraps ErrInvalidOption with a description of the bad field.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}
