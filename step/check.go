package step

import (
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/timemath"
)

// checkStep validates a Request against a quota, and the store's clock.
func checkStep(req floodgate.Request, quota int64, now time.Time) error {
	if okStep(req, quota, now.Unix()) {
		return nil
	}
	return badStep(req, quota, now)
}

// okStep reports whether a request passes checkStep at Unix second sec; it
// is small enough to inline.
func okStep(req floodgate.Request, quota, sec int64) bool {
	return (req.N >= 1 || req.N != 0 && req.Op == floodgate.OpSettle) && req.MaxDelay >= 0 && req.Op <= floodgate.OpSettle &&
		(req.N <= quota || req.Op != floodgate.OpTake) && uint64(sec) <= timemath.LatestUnix
}

// badStep returns the error of a request checkStep refused, off the hot
// path.
func badStep(req floodgate.Request, quota int64, now time.Time) error {
	if err := CheckRequest(req, quota); err != nil {
		return err
	}
	// State words are nanoseconds since 1970 with 0 meaning "new key".
	return fmt.Errorf("%w: the store's clock reads %v, outside 1970 to 2262", floodgate.ErrInvalidConfig, now)
}

// CheckRequest returns the error every transition returns for req under a
// valid configuration of quota units (its Policy().Quota), whatever the
// state: a cost below 1, or 0 for OpSettle (floodgate.ErrInvalidN), a
// negative MaxDelay
// (floodgate.ErrInvalidDelay), an unknown Op (floodgate.ErrInvalidConfig),
// or an OpTake above the quota (floodgate.ErrExceedsLimit). A store that
// decides elsewhere than in these functions (redisstore's scripts) calls
// it first.
func CheckRequest(req floodgate.Request, quota int64) error {
	switch {
	case req.N == 0 || req.N < 0 && req.Op != floodgate.OpSettle:
		return fmt.Errorf("%w: got %d", floodgate.ErrInvalidN, req.N)
	case req.MaxDelay < 0:
		return fmt.Errorf("%w: got %v", floodgate.ErrInvalidDelay, req.MaxDelay)
	case req.Op > floodgate.OpSettle:
		return fmt.Errorf("%w: unknown Op %d", floodgate.ErrInvalidConfig, req.Op)
	case req.N > quota && req.Op == floodgate.OpTake:
		return fmt.Errorf("%w: n=%d, limit %d", floodgate.ErrExceedsLimit, req.N, quota)
	}
	return nil
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
