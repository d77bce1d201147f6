package step

import (
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// checkStep validates a Request against a quota, and the store's clock,
// with the rules every store applies (floodgate.CheckRequest and
// floodgate.CheckTime).
func checkStep(req floodgate.Request, quota int64, now time.Time) error {
	if err := floodgate.CheckRequest(req, quota); err != nil {
		return err
	}
	return floodgate.CheckTime(now)
}

// nsDur converts a nanosecond count of a decision, clamping negatives to 0.
func nsDur(ns int64) time.Duration { return time.Duration(max(ns, 0)) }

// maxDelayNs returns the request's maximum delay in nanoseconds, at most
// floodgate.MaxDelay.
func maxDelayNs(req floodgate.Request) int64 { return int64(min(req.MaxDelay, floodgate.MaxDelay)) }

// settleBack returns the units a settlement of n < 0 gives back, -n, as a
// count no algorithm holds more of when -n overflows.
func settleBack(n int64) int64 {
	if n == math.MinInt64 {
		return math.MaxInt64
	}
	return -n
}

// settleCount settles n units (a charge for n > 0, a give-back for n < 0)
// into a window's count of a window of limit units: a charge of up to
// 2·limit units in the window, compared without overflow, a give-back of
// at most the units counted. It returns the units settled and the new
// count.
func settleCount(limit, count, n int64) (granted, next int64) {
	if n > 0 {
		granted = min(n, max(limit-(count-limit), 0))
		return granted, count + granted
	}
	granted = min(settleBack(n), count)
	return granted, count - granted
}
