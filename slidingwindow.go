package floodgate

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/internal/timemath"
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
// the earliest instant at which est + n ≤ Limit (the previous window's
// weight decays linearly; the reference bisects for the instant, the Lua
// script solves for it and checks its neighbours, and both find the same
// nanosecond).
//
// The estimate is computed in float64 in a fixed order of operations that the
// Lua script repeats, so both stores decide alike.
//
// Reserve admits at the earliest instant within maxDelay at which the
// estimate has room, possibly in the next window; as for FixedWindow, once a
// reservation reaches into the next window, the current one admits no more.
//
// # Sub-windows
//
// With SubWindows S of 2 or more it is a different counter, which never
// admits more than Limit units in any interval of length Window: it splits
// time into sub-windows of Window/S, counts the units admitted in each,
// and admits n units when the units of the current sub-window and of the
// S before it, plus n, are at most Limit. Those S+1 sub-windows cover every
// interval of length Window that ends now, so the last admission of any
// such interval saw every earlier one. The price is slack: a unit is
// counted for up to Window + Window/S, so a saturated key admits at least
// Limit·S/(S+1) units per Window on average (98.4% at S = 60) where an
// exact sliding log admits Limit. The state is S+1 counts and their total
// (Redis: one string of 7·(S+4) bytes per key, 448 at S = 60; memstore:
// about 8·S + 141 bytes, 621 at S = 60), and a decision costs O(1)
// amortized: a sub-window's count is dropped once, when it leaves. RetryAfter is exact: the start of the
// first sub-window at which enough counts have left. S = 60 is Figma's
// choice (2017) and a good default; SubWindows 0 and 1 keep the two-counter
// estimate above, unchanged.
//
// A reservation (Reserve, a Limits' delayed take) admits at the start of a
// later sub-window; counts still live that would leave the S+1 kept
// counts earlier are added to the oldest kept one, so they are counted
// longer, never shorter, and the key may deny until it leaves.
//
// With sub-windows, Window may be up to 367 days (a year), Window/S being
// a whole number of microseconds: a year with S = 52 counts by weeks, and
// admits at least 52/53 of its Limit per year under saturation. The two
// counters and the sub-windows keep their state apart (a store keeps each
// under a kind of its own): changing SubWindows between 1 and a larger
// value starts a key's count afresh; changing it between two values of 2
// or more keeps every unit counted, at its latest possible instant.
//
// The zero value is not usable; SlidingWindow is a plain value, safe to copy
// and to share.
type SlidingWindow struct {
	// Limit is the number of units admitted per sliding window; at least 1
	// and at most 2^53, so that the float64 estimate counts units exactly.
	Limit int64
	// Window is the window length: positive, a whole number of microseconds
	// and at most MaxWindow; with SubWindows of 2 or more, at most 367
	// days and a whole number of microseconds per sub-window.
	Window time.Duration
	// SubWindows is the number of sub-windows S, at most MaxSubWindows: 0
	// or 1 for the two-counter estimate, 2 or more for the bounded counter
	// (see Sub-windows).
	SubWindows int
}

// MaxSubWindows is the largest SlidingWindow.SubWindows.
const MaxSubWindows = 64

var _ Algorithm = SlidingWindow{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a SlidingWindow) Validate() error {
	if a.SubWindows < 2 {
		if a.SubWindows < 0 {
			return fmt.Errorf("%w: SubWindows must be between 0 and %d, got %d", ErrInvalidConfig, MaxSubWindows, a.SubWindows)
		}
		return checkWindow(a.Limit, a.Window)
	}
	switch s := time.Duration(a.SubWindows); {
	case a.SubWindows > MaxSubWindows:
		return fmt.Errorf("%w: SubWindows must be between 0 and %d, got %d", ErrInvalidConfig, MaxSubWindows, a.SubWindows)
	case a.Window > maxSubWindowed:
		return fmt.Errorf("%w: Window %v is longer than %v, the longest with sub-windows", ErrInvalidConfig, a.Window, maxSubWindowed)
	case a.Window > 0 && (a.Window%s != 0 || (a.Window/s)%time.Microsecond != 0):
		return fmt.Errorf("%w: Window %v is not %d sub-windows of a whole number of microseconds", ErrInvalidConfig, a.Window, a.SubWindows)
	}
	return checkLongWindow(a.Limit, a.Window)
}

// maxSubWindowed is the longest window of a SlidingWindow with
// sub-windows: 367 days, a year and a leap day of slack.
const maxSubWindowed = time.Duration(timemath.MaxCalendarWindow)

// Sub returns the length of a sub-window, Window/SubWindows, or Window
// without sub-windows.
func (a SlidingWindow) Sub() time.Duration { return a.Window / time.Duration(max(a.SubWindows, 1)) }

// Policy returns Limit units per Window.
func (a SlidingWindow) Policy() Policy {
	if a.Validate() != nil {
		return Policy{}
	}
	return Policy{Quota: a.Limit, Window: a.Window}
}

func (SlidingWindow) algorithm() {}

// String describes the configuration, e.g. "SlidingWindow{100 per 1m0s}" or,
// with sub-windows, "SlidingWindow{100 per 1m0s in 60}".
func (a SlidingWindow) String() string {
	if a.SubWindows >= 2 {
		return fmt.Sprintf("SlidingWindow{%d per %v in %d}", a.Limit, a.Window, a.SubWindows)
	}
	return fmt.Sprintf("SlidingWindow{%d per %v}", a.Limit, a.Window)
}
