package floodgate

import (
	"fmt"
	"time"
)

// SlidingWindow approximates a sliding window with two counters, as
// Cloudflare described in "How we built rate limiting capable of scaling to
// millions of domains" (2017): the count of the previous fixed window,
// weighted by the share of it still inside the sliding window, plus the
// count of the current one,
//
//	est = prev·(1 − f) + curr, f the elapsed fraction of the current window,
//
// and a request of n units is admitted when est + n ≤ Limit. It smooths the
// boundary burst of FixedWindow at the cost of two counters per key. The
// estimate assumes the previous window's traffic was spread evenly; because
// the previous window's weight is at most 1, it never admits more than Limit
// units within one fixed window. Remaining, RetryAfter and ResetAfter follow
// the estimate: RetryAfter is the earliest instant at which est + n ≤ Limit,
// found by solving the linear decay of the previous window's weight.
//
// The estimate is computed in float64 in a fixed order of operations that the
// Lua script repeats, so both stores decide alike.
//
// Reserve admits at the earliest instant within maxDelay at which the
// estimate has room, possibly in the next window; as for FixedWindow, once a
// reservation reaches into the next window, the current one admits no more.
//
// The zero value is not usable; SlidingWindow is a plain value, safe to copy
// and to share.
type SlidingWindow struct {
	// Limit is the number of units admitted per sliding window; at least 1
	// and at most 2^53, so that the float64 estimate counts units exactly.
	Limit int64
	// Window is the window length: positive, a whole number of microseconds
	// and at most MaxWindow.
	Window time.Duration
}

var _ Algorithm = SlidingWindow{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a SlidingWindow) Validate() error { return checkWindow(a.Limit, a.Window) }

// Policy returns Limit units per Window.
func (a SlidingWindow) Policy() Policy { return windowPolicy(a.Limit, a.Window) }

func (SlidingWindow) algorithm() {}

// String describes the configuration, e.g. "SlidingWindow{100 per 1m0s}".
func (a SlidingWindow) String() string {
	return fmt.Sprintf("SlidingWindow{%d per %v}", a.Limit, a.Window)
}
