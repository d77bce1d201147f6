package floodgate

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/internal/timemath"
)

// The algorithms work in integer nanoseconds since the Unix epoch so that
// the in-process store and the Lua scripts compute the same values and
// nothing drifts (package step holds the transitions; internal/timemath
// their arithmetic).

// emission returns the emission interval of rate units per per, rounded up
// to a whole nanosecond, and the tolerance size·interval. It rejects rates
// above one unit per nanosecond and tolerances above MaxWindow.
func emission(rate int64, per time.Duration, size int64, sizeName string) (interval, tolerance int64, err error) {
	if interval, tolerance, ok := timemath.Emission(rate, per, size); ok {
		return interval, tolerance, nil
	}
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
	return 0, 0, fmt.Errorf("%w: %s %d at %d per %v takes longer than MaxWindow (%v) to restore",
		ErrInvalidConfig, sizeName, size, rate, per, MaxWindow)
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

// checkLongWindow is checkWindow for a window that may be longer than
// MaxWindow (a sliding window with sub-windows, up to a year), checked by
// its caller.
func checkLongWindow(limit int64, window time.Duration) error {
	if window > MaxWindow {
		return checkWindow(limit, time.Second) // the limit's checks
	}
	return checkWindow(limit, window)
}

// windowPolicy returns the Policy of a window algorithm: Limit units per
// Window, or the zero Policy for an invalid configuration.
func windowPolicy(limit int64, window time.Duration) Policy {
	if checkWindow(limit, window) != nil {
		return Policy{}
	}
	return Policy{Quota: limit, Window: window}
}
