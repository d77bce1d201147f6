package floodgate

import (
	"fmt"
	"time"
)

// SlidingLog is the exact sliding window: it remembers the instant of every
// admitted request and admits n units when the units admitted within
// (now − Window, now], plus n, are at most Limit. No window-long interval
// ever holds more than Limit units. The price is memory: one entry per
// admitted request still inside the window, at most Limit entries per key
// (16 bytes each in memory; a sorted-set member in Redis). Use it for small
// limits that must be exact (logins, password resets, payouts).
//
// Admissions are kept in time order. Reserve admits at the earliest instant
// within maxDelay at which enough old entries have left the window; a request
// never departs before one reserved earlier, so after a reservation into the
// future, AllowN denies until that instant.
//
// The zero value is not usable; SlidingLog is a plain value, safe to copy and
// to share.
type SlidingLog struct {
	// Limit is the number of units admitted per sliding window; at least 1.
	Limit int64
	// Window is the window length: positive, a whole number of microseconds
	// and at most MaxWindow.
	Window time.Duration
}

var _ Algorithm = SlidingLog{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a SlidingLog) Validate() error { return checkWindow(a.Limit, a.Window) }

// Policy returns Limit units per Window.
func (a SlidingLog) Policy() Policy { return windowPolicy(a.Limit, a.Window) }

func (SlidingLog) algorithm() {}

// String describes the configuration, e.g. "SlidingLog{100 per 1m0s}".
func (a SlidingLog) String() string {
	return fmt.Sprintf("SlidingLog{%d per %v}", a.Limit, a.Window)
}
