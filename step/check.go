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
