package floodgate

import (
	"fmt"
	"math/bits"
	"time"
)

// The reference transitions work in integer nanoseconds since the Unix epoch
// so that the in-process store and the Lua scripts compute the same values
// and nothing drifts. State words are int64 nanoseconds because they are a
// storage format shared with the Lua scripts, not a user-facing API.

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// windowStart returns the start of the epoch-aligned window of length w that
// holds the instant now.
func windowStart(now, w int64) int64 { return floorDiv(now, w) * w }

// emission returns the emission interval of rate units per per, rounded up to
// a whole nanosecond, and the tolerance size·interval. It rejects rates above
// one unit per nanosecond and tolerances above MaxWindow.
func emission(rate int64, per time.Duration, size int64, sizeName string) (interval, tolerance int64, err error) {
	if interval, tolerance, ok := emissionFast(rate, per, size); ok {
		return interval, tolerance, nil
	}
	return emissionSlow(rate, per, size, sizeName)
}

// emissionFast is emission for a config a store normalized to Rate 1, small
// enough to inline into the Steps: the bound is checked with a 128-bit
// product instead of a division. It reports false for anything else.
func emissionFast(rate int64, per time.Duration, size int64) (interval, tolerance int64, ok bool) {
	hi, lo := bits.Mul64(uint64(size), uint64(per))
	return int64(per), int64(lo), rate == 1 && per > 0 && size > 0 && hi == 0 && lo <= uint64(MaxWindow)
}

// emissionSlow is emission for any rate, with the errors.
func emissionSlow(rate int64, per time.Duration, size int64, sizeName string) (interval, tolerance int64, err error) {
	switch {
	case rate < 1:
		return 0, 0, fmt.Errorf("%w: Rate must be at least 1, got %d", ErrInvalidConfig, rate)
	case per <= 0:
		return 0, 0, fmt.Errorf("%w: Per must be positive, got %v", ErrInvalidConfig, per)
	case size < 1:
		return 0, 0, fmt.Errorf("%w: %s must be at least 1, got %d", ErrInvalidConfig, sizeName, size)
	case int64(per) < rate:
		return 0, 0, fmt.Errorf("%w: Rate %d per %v is more than one unit per nanosecond", ErrInvalidConfig, rate, per)
	}
	// ⌈per/rate⌉ without forming per+rate−1, which overflows for periods and
	// rates near MaxInt64.
	interval = int64(per) / rate
	if int64(per)%rate != 0 {
		interval++
	}
	if hi, lo := bits.Mul64(uint64(size), uint64(interval)); hi != 0 || lo > uint64(MaxWindow) {
		return 0, 0, fmt.Errorf("%w: %s %d at %d per %v takes longer than MaxWindow (%v) to restore",
			ErrInvalidConfig, sizeName, size, rate, per, MaxWindow)
	}
	return interval, size * interval, nil
}

// maxLimit is the largest Limit of the window algorithms: every integer up
// to it is exact in float64, the numbers of Lua and of the sliding
// counter's estimate.
const maxLimit = 1 << 53

// checkWindow validates the limit and window of the window algorithms.
func checkWindow(limit int64, window time.Duration) error {
	switch {
	case limit < 1:
		return fmt.Errorf("%w: Limit must be at least 1, got %d", ErrInvalidConfig, limit)
	case limit > maxLimit:
		// Above 2^53 float64 no longer tells units apart: the sliding
		// counter's estimate and the Lua scripts' counts would round.
		return fmt.Errorf("%w: Limit %d is above 2^53, which floats cannot count exactly", ErrInvalidConfig, limit)
	case window <= 0:
		return fmt.Errorf("%w: Window must be positive, got %v", ErrInvalidConfig, window)
	case window > MaxWindow:
		return fmt.Errorf("%w: Window %v is longer than MaxWindow (%v)", ErrInvalidConfig, window, MaxWindow)
	case window%time.Microsecond != 0:
		// Redis reports time in microseconds; whole-microsecond windows keep
		// window boundaries exact in the Lua scripts.
		return fmt.Errorf("%w: Window must be a whole number of microseconds, got %v", ErrInvalidConfig, window)
	}
	return nil
}

// windowPolicy returns the Policy of a window algorithm: Limit units per
// Window, or the zero Policy for an invalid configuration.
func windowPolicy(limit int64, window time.Duration) Policy {
	if checkWindow(limit, window) != nil {
		return Policy{}
	}
	return Policy{Quota: limit, Window: window}
}

// checkStep validates a Request against a quota, and the store's clock.
func checkStep(req Request, quota int64, now time.Time) error {
	if okStep(req, quota, now.Unix()) {
		return nil
	}
	return badStep(req, quota, now)
}

// okStep reports whether a request passes checkStep at Unix second sec; it
// is small enough to inline.
func okStep(req Request, quota, sec int64) bool {
	return req.N >= 1 && req.MaxDelay >= 0 && req.Op <= OpRefund &&
		(req.N <= quota || req.Op != OpTake) && uint64(sec) <= latestUnix
}

// latestUnix is the last second whose nanoseconds fit an int64 (in 2262).
const latestUnix = (1<<63 - 1) / 1_000_000_000

// badStep returns the error of a request checkStep refused, off the hot
// path.
func badStep(req Request, quota int64, now time.Time) error {
	if err := checkRequest(req); err != nil {
		return err
	}
	if req.Op > OpRefund {
		return fmt.Errorf("%w: unknown Op %d", ErrInvalidConfig, req.Op)
	}
	if req.N > quota && req.Op == OpTake {
		return fmt.Errorf("%w: n=%d, limit %d", ErrExceedsLimit, req.N, quota)
	}
	// State words are nanoseconds since 1970 with 0 meaning "new key".
	return fmt.Errorf("%w: the store's clock reads %v, outside 1970 to 2262", ErrInvalidConfig, now)
}

// nsDur converts a nanosecond count of a decision, clamping negatives to 0.
func nsDur(ns int64) time.Duration { return time.Duration(max(ns, 0)) }

// maxDelayNs returns the request's maximum delay in nanoseconds, at most
// MaxDelay.
func maxDelayNs(req Request) int64 { return int64(min(req.MaxDelay, MaxDelay)) }
