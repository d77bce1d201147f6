package step

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// Kind names the kind of state a configuration keeps: one per algorithm,
// and one each for the sliding window with sub-windows and the calendar
// window. A store keeps the state of a key per Kind.
type Kind uint8

// The algorithms floodgate implements.
const (
	KindTokenBucket Kind = iota + 1
	KindLeakyBucket
	KindFixedWindow
	KindSlidingWindow
	KindSlidingLog
	// KindSubWindows is a SlidingWindow with SubWindows of 2 or more,
	// whose state (SubWindowState) is kept apart from the two-counter
	// estimate's.
	KindSubWindows
	// KindCalendarWindow is a CalendarWindow: a fixed window's state
	// (FixedWindowState) under civil boundaries, kept apart from the fixed
	// windows', whose states expire with their own windows.
	KindCalendarWindow
)

// String returns the name of the kind's configuration type:
// "TokenBucket", "LeakyBucket", "FixedWindow", "SlidingWindow",
// "SlidingLog", "SlidingWindow/sub-windows" or "CalendarWindow".
func (k Kind) String() string {
	switch k {
	case KindTokenBucket:
		return "TokenBucket"
	case KindLeakyBucket:
		return "LeakyBucket"
	case KindFixedWindow:
		return "FixedWindow"
	case KindSlidingWindow:
		return "SlidingWindow"
	case KindSlidingLog:
		return "SlidingLog"
	case KindSubWindows:
		return "SlidingWindow/sub-windows"
	case KindCalendarWindow:
		return "CalendarWindow"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// KindOf returns the Kind of alg, one of the five configurations as a
// value (a CalendarWindow is of KindCalendarWindow, a SlidingWindow with
// sub-windows of KindSubWindows; floodgate.New dereferences pointers
// before it binds a store). Any
// other value, a pointer or nil, is an error matching
// floodgate.ErrInvalidConfig. KindOf does not validate alg.
func KindOf(alg floodgate.Algorithm) (Kind, error) {
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		return KindTokenBucket, nil
	case floodgate.LeakyBucket:
		return KindLeakyBucket, nil
	case floodgate.FixedWindow:
		return KindFixedWindow, nil
	case floodgate.CalendarWindow:
		return KindCalendarWindow, nil
	case floodgate.SlidingWindow:
		if a.SubWindows >= 2 {
			return KindSubWindows, nil
		}
		return KindSlidingWindow, nil
	case floodgate.SlidingLog:
		return KindSlidingLog, nil
	case nil:
		return 0, fmt.Errorf("%w: nil algorithm", floodgate.ErrInvalidConfig)
	}
	return 0, fmt.Errorf("%w: %T is not one of the five configurations as a value", floodgate.ErrInvalidConfig, alg)
}
