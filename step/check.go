package step

import (
	"fmt"
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
	return req.N >= 1 && req.MaxDelay >= 0 && req.Op <= floodgate.OpRefund &&
		(req.N <= quota || req.Op != floodgate.OpTake) && uint64(sec) <= timemath.LatestUnix
}

// badStep returns the error of a request checkStep refused, off the hot
// path.
func badStep(req floodgate.Request, quota int64, now time.Time) error {
	switch {
	case req.N < 1:
		return fmt.Errorf("%w: got %d", floodgate.ErrInvalidN, req.N)
	case req.MaxDelay < 0:
		return fmt.Errorf("%w: got %v", floodgate.ErrInvalidDelay, req.MaxDelay)
	case req.Op > floodgate.OpRefund:
		return fmt.Errorf("%w: unknown Op %d", floodgate.ErrInvalidConfig, req.Op)
	case req.N > quota && req.Op == floodgate.OpTake:
		return fmt.Errorf("%w: n=%d, limit %d", floodgate.ErrExceedsLimit, req.N, quota)
	}
	// State words are nanoseconds since 1970 with 0 meaning "new key".
	return fmt.Errorf("%w: the store's clock reads %v, outside 1970 to 2262", floodgate.ErrInvalidConfig, now)
}

// nsDur converts a nanosecond count of a decision, clamping negatives to 0.
func nsDur(ns int64) time.Duration { return time.Duration(max(ns, 0)) }

// maxDelayNs returns the request's maximum delay in nanoseconds, at most
// floodgate.MaxDelay.
func maxDelayNs(req floodgate.Request) int64 { return int64(min(req.MaxDelay, floodgate.MaxDelay)) }
