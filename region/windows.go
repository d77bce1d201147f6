package region

import (
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// windows numbers the windows of a quota: a FixedWindow's, aligned to the
// Unix epoch (window i starts i·Window after it), or a CalendarWindow's,
// numbered by its first date (days since 1970-01-01 for Day, weeks for
// Week, months since year 0 for Month, the year for Year), so that
// consecutive windows have consecutive indices whatever their lengths.
type windows struct {
	fixed time.Duration // a FixedWindow's length; 0 for a calendar
	cal   floodgate.CalendarWindow
	last  atomic.Pointer[calWindow] // the calendar window last looked up
}

type calWindow struct {
	i          int64
	start, end time.Time
}

func newWindows(alg floodgate.Algorithm) *windows {
	switch a := alg.(type) {
	case floodgate.FixedWindow:
		return &windows{fixed: a.Window}
	case floodgate.CalendarWindow:
		return &windows{cal: a}
	}
	return nil
}

// index returns the index of the window holding t.
func (w *windows) index(t time.Time) int64 {
	if w.fixed > 0 {
		return windowIndex(t, w.fixed)
	}
	if c := w.last.Load(); c != nil && !t.Before(c.start) && t.Before(c.end) {
		return c.i // most steps fall in the window the last one did
	}
	start, end := w.cal.Window(t)
	i := w.calIndex(start)
	w.last.Store(&calWindow{i, start, end})
	return i
}

// start returns the first instant of window i. A calendar window of no
// length (a date a time zone skipped) starts where the next one does.
func (w *windows) start(i int64) time.Time {
	if w.fixed > 0 {
		return windowStart(i, w.fixed)
	}
	if c := w.last.Load(); c != nil {
		switch i {
		case c.i:
			return c.start
		case c.i + 1:
			return c.end
		}
	}
	y, m, d := w.calDate(i)
	loc := w.cal.Location
	if loc == nil {
		loc = time.UTC
	}
	// Near the reset time on the window's first date; clock shifts move
	// it by hours, and short windows (next to a skipped date) make that
	// land in a neighbour: walk to window i, a few steps at most.
	start, end := w.cal.Window(time.Date(y, m, d, 0, 0, 0, 0, loc).Add(w.cal.Offset))
	for range 8 {
		switch j := w.calIndex(start); {
		case j < i:
			start, end = w.cal.Window(end)
		case j > i:
			prev, _ := w.cal.Window(start.Add(-time.Nanosecond))
			if w.calIndex(prev) < i {
				return start // window i has no length: it starts where the next does
			}
			start = prev
		default:
			return start
		}
	}
	return start
}

// length returns the length of window i.
func (w *windows) length(i int64) time.Duration {
	if w.fixed > 0 {
		return w.fixed
	}
	return w.start(i + 1).Sub(w.start(i))
}

// longest is the longest a window lasts: the FixedWindow's Window, or the
// CalendarWindow's Policy Window (31 days for a month).
func (w *windows) longest() time.Duration {
	if w.fixed > 0 {
		return w.fixed
	}
	return w.cal.Policy().Window
}

// epochWeekday is the weekday of 1970-01-01.
const epochWeekday = time.Thursday

// calIndex returns the index of the calendar window that starts at start.
func (w *windows) calIndex(start time.Time) int64 {
	// The window's first date: the local date and time of its start, less
	// the reset time. A start that a clock shift moved later than the
	// reset time (a gap) stays on its date, since shifts are hours.
	loc := w.cal.Location
	if loc == nil {
		loc = time.UTC
	}
	l := start.In(loc)
	wall := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC).Add(-w.cal.Offset)
	y, m, _ := wall.Date()
	days := floorDiv(wall.Unix(), 86400)
	switch w.cal.Unit {
	case floodgate.Day:
		return days
	case floodgate.Week:
		return floorDiv(days-weekShift(w.cal.WeekStart), 7)
	case floodgate.Month:
		return int64(y)*12 + int64(m) - 1
	}
	return int64(y)
}

// calDate returns the first date of calendar window i.
func (w *windows) calDate(i int64) (int, time.Month, int) {
	switch w.cal.Unit {
	case floodgate.Day:
		return time.Unix(i*86400, 0).UTC().Date()
	case floodgate.Week:
		return time.Unix((7*i+weekShift(w.cal.WeekStart))*86400, 0).UTC().Date()
	case floodgate.Month:
		return int(floorDiv(i, 12)), time.Month(i-12*floorDiv(i, 12)) + 1, 1
	}
	return int(i), time.January, 1
}

// weekShift is the days from 1970-01-01 to the first date after it (or
// on it) that falls on start: weeks starting on start begin 7i + shift
// days after the epoch.
func weekShift(start time.Weekday) int64 {
	return int64((int(start) - int(epochWeekday) + 7) % 7)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// WindowOf returns the window of alg, a FixedWindow or a CalendarWindow,
// that holds t: the index the Stores and the coordinator number it by, its
// first instant and the first instant of the next. For other algorithms it
// returns zeros.
func WindowOf(alg floodgate.Algorithm, t time.Time) (i int64, start, end time.Time) {
	w := newWindows(alg)
	if w == nil || alg.Validate() != nil {
		return 0, time.Time{}, time.Time{}
	}
	i = w.index(t)
	return i, w.start(i), w.start(i + 1)
}
