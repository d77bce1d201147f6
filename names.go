package floodgate

import (
	"fmt"
	"strings"
)

// nameOf returns the name a Limiter of alg has when Options.Name is empty
// (see Limiter.Name): a function of the configuration alone, so that every
// process that builds the same limiter names it alike and shares its
// state, and limiters of different configurations never do (durations are
// written by time.Duration.String, which tells every two apart). alg is
// valid, as a value.
func nameOf(alg Algorithm) string {
	switch a := alg.(type) {
	case TokenBucket:
		return fmt.Sprintf("tb:%d/%v:b%d", a.Rate, a.Per, a.Burst)
	case LeakyBucket:
		return fmt.Sprintf("lb:%d/%v:c%d", a.Rate, a.Per, a.Capacity)
	case FixedWindow:
		return fmt.Sprintf("fw:%d/%v", a.Limit, a.Window)
	case CalendarWindow:
		return fmt.Sprintf("cw:%d/%v:%s:%v:%v", a.Limit, a.Unit, a.location(), a.WeekStart, a.Offset)
	case SlidingWindow:
		if a.SubWindows >= 2 {
			return fmt.Sprintf("sw:%d/%v:s%d", a.Limit, a.Window, a.SubWindows)
		}
		return fmt.Sprintf("sw:%d/%v", a.Limit, a.Window)
	case SlidingLog:
		return fmt.Sprintf("sl:%d/%v", a.Limit, a.Window)
	case Limits:
		names := make([]string, len(a))
		for i, l := range a {
			names[i] = nameOf(l)
		}
		return strings.Join(names, "+")
	}
	return ""
}
