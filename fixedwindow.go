package floodgate

import (
	"fmt"
	"time"
)

// FixedWindow admits Limit units per window; windows are aligned to the Unix
// epoch, so every store and every process agrees on their boundaries. It is
// the cheapest algorithm and the easiest to explain ("100 per minute"), but
// a client can pass up to 2·Limit within one window length across a boundary
// (Limit at the end of one window, Limit at the start of the next): that is
// its contract. Use SlidingWindow or SlidingLog where that matters.
//
// Reserve admits into a later window when the current one is full and the
// later window starts within maxDelay. Once a reservation reaches into a later
// window, the rest of the current window admits nothing more (the state holds
// one window), which never over-admits.
//
// The zero value is not usable; FixedWindow is a plain value, safe to copy and
// to share.
type FixedWindow struct {
	// Limit is the number of units admitted per window; at least 1.
	Limit int64
	// Window is the window length: positive, a whole number of microseconds
	// and at most MaxWindow.
	Window time.Duration
}

var _ Algorithm = FixedWindow{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a FixedWindow) Validate() error { return checkWindow(a.Limit, a.Window) }

// Policy returns Limit units per Window.
func (a FixedWindow) Policy() Policy { return windowPolicy(a.Limit, a.Window) }

func (FixedWindow) algorithm() {}

// String describes the configuration, e.g. "FixedWindow{100 per 1m0s}".
func (a FixedWindow) String() string {
	return fmt.Sprintf("FixedWindow{%d per %v}", a.Limit, a.Window)
}
