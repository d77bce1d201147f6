// Package timemath is the integer time arithmetic that the root package's
// validation, the reference steps (package step) and memstore share: state
// words are nanoseconds since the Unix epoch, and every store must compute
// the same values from them.
package timemath

import (
	"math/bits"
	"time"
)

// MaxWindow is floodgate.MaxWindow: 2^52 ns, the longest window and the
// longest time to restore a full quota (every time difference then stays
// exact in the doubles of Redis' Lua).
const MaxWindow = 1 << 52

// MaxCalendarWindow bounds the length of a floodgate.CalendarWindow's
// window, in ns, for stores that reclaim state: a leap year and a day for
// clock shifts.
const MaxCalendarWindow = 367 * 24 * 3600 * 1e9

// MaxUnix bounds a store's clock: steps are decided only at instants
// before MaxUnix seconds since the Unix epoch (in 2255). Their nanoseconds
// fit an int64, and Redis' scripts compute window starts from the instant
// in microseconds, which doubles hold exactly only below 2^53. Go checks
// it (floodgate.CheckTime) and the scripts are written with it.
const MaxUnix = 9_000_000_000

// FloorDiv returns ⌊a/b⌋ for b > 0.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// CeilDiv returns ⌈a/b⌉ for b > 0.
func CeilDiv(a, b int64) int64 { return -FloorDiv(-a, b) }

// WindowStart returns the start of the epoch-aligned window of length w
// that holds the instant now.
func WindowStart(now, w int64) int64 { return FloorDiv(now, w) * w }

// EmissionFast is Emission for a configuration normalized to rate 1, small
// enough to inline into the steps: the bound is checked with a 128-bit
// product instead of a division. It reports false for anything else.
func EmissionFast(rate int64, per time.Duration, size int64) (interval, tolerance int64, ok bool) {
	hi, lo := bits.Mul64(uint64(size), uint64(per))
	return int64(per), int64(lo), rate == 1 && per > 0 && size > 0 && hi == 0 && lo <= MaxWindow
}

// Emission returns the emission interval of rate units per per, rounded up
// to a whole nanosecond, and the tolerance size·interval. It reports false
// for a rate below 1, a period that is not positive, a size below 1, more
// than one unit per nanosecond, or a tolerance above MaxWindow; the root
// package's Validate methods say which.
func Emission(rate int64, per time.Duration, size int64) (interval, tolerance int64, ok bool) {
	if interval, tolerance, ok := EmissionFast(rate, per, size); ok {
		return interval, tolerance, true
	}
	if rate < 1 || per <= 0 || size < 1 || int64(per) < rate {
		return 0, 0, false
	}
	// ⌈per/rate⌉ without forming per+rate−1, which overflows for periods
	// and rates near MaxInt64.
	interval = int64(per) / rate
	if int64(per)%rate != 0 {
		interval++
	}
	if hi, lo := bits.Mul64(uint64(size), uint64(interval)); hi != 0 || lo > MaxWindow {
		return 0, 0, false
	}
	return interval, size * interval, true
}
