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
// and a request of n units is admitted when est + n ≤ Limit. It costs two
// counters per key, where SlidingLog keeps an entry per admitted unit, but
// it is not exact: the estimate assumes the previous window's traffic was
// spread evenly. It admits at most Limit units per fixed window (est ≥
// curr) and at most 2·Limit − 1 in any window of length Window; a client
// that sends Limit units just before a window boundary and then retries
// when RetryAfter says gets exactly 2·Limit − 1 through one window. On
// Poisson traffic at 1× and 1.2× a Limit of 100, 11.82% and 16.35% of its
// admissions would be denied by an exact window (docs/algorithms.md gives
// the table by traffic shape and the command, in the bench module). Use
// SlidingLog where the limit must hold in every window.
//
// Remaining, RetryAfter and ResetAfter follow the estimate: RetryAfter is
// the earliest instant at which est + n ≤ Limit, found by solving the linear
// decay of the previous window's weight.
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
