package floodgate

import (
	"fmt"
	"time"
)

// CalendarUnit is the length of a CalendarWindow: a civil day, week, month
// or year.
type CalendarUnit uint8

// The units of a CalendarWindow.
const (
	Day CalendarUnit = iota + 1
	Week
	Month
	Year
)

// String returns "day", "week", "month" or "year".
func (u CalendarUnit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// CalendarWindow is a fixed window whose boundaries are civil: it admits
// Limit units per calendar day, week, month or year in a time zone, the
// quotas of billing plans and contracts ("1,000,000 tokens per month,
// resetting at 08:00 Tokyo time on the 1st"). It behaves as FixedWindow
// in every other respect (up to 2·Limit across a boundary, reservations
// into the next window). Its state is a fixed window's, of a kind of its
// own (step.KindCalendarWindow): a CalendarWindow and a FixedWindow bound
// under one name keep separate counts, and switching a name from one to
// the other starts its keys afresh.
//
// A window starts at the first instant at which the local clock of
// Location reads the reset time (Offset after midnight) on the window's
// first date, or later: a reset time that falls in a daylight-saving gap
// resets when the gap ends (at 03:00 for a reset at 02:30 on the night
// clocks jump from 02:00 to 03:00), and one that occurs twice when clocks
// go back resets at its first occurrence. A date a time zone skipped
// (Pacific/Apia's 30 December 2011) gives a window of no length, which
// is skipped. Days are therefore 23, 24 or 25 hours long in zones with a
// one-hour shift (23.5 or 24.5 in Australia/Lord_Howe), and months and
// years follow the calendar (February 2028 has 29 days), as Go's time
// package computes them with its time-zone database.
//
// Window reports the window holding an instant. Decision.ResetAfter and
// RetryAfter are exact to the nanosecond: the next boundary, not a
// nominal length. Policy's Window (the w of the RateLimit-Policy field) is
// the unit's longest civil length without clock shifts: 24 hours for a
// day, 7 days for a week, 31 days for a month and 366 days for a year;
// the reset (t) of the RateLimit field is exact.
//
// On Redis, decisions stay on the server's clock: the client computes the
// boundaries around its own clock and the script picks the window holding
// the server's time (package redisstore).
//
// The zero value is not usable; CalendarWindow is a plain value, safe to
// copy and to share (a *time.Location is immutable).
type CalendarWindow struct {
	// Limit is the number of units admitted per window; at least 1 and at
	// most 2^53.
	Limit int64
	// Unit is the window's length: Day, Week, Month or Year.
	Unit CalendarUnit
	// Location is the time zone of the boundaries; nil means UTC.
	Location *time.Location
	// WeekStart is the first day of a week, for Unit Week: time.Sunday
	// (the zero value) to time.Saturday. ISO 8601 weeks start on
	// time.Monday. It must be time.Sunday for the other units.
	WeekStart time.Weekday
	// Offset is the reset time, after local midnight of a window's first
	// date (the first of the month for Month, 1 January for Year): at
	// least 0, below 24 hours and a whole number of seconds.
	Offset time.Duration
}

var _ Algorithm = CalendarWindow{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a CalendarWindow) Validate() error {
	switch {
	case a.Limit < 1:
		return fmt.Errorf("%w: Limit must be at least 1, got %d", ErrInvalidConfig, a.Limit)
	case a.Limit > maxLimit:
		return fmt.Errorf("%w: Limit %d is above 2^53, which floats cannot count exactly", ErrInvalidConfig, a.Limit)
	case a.Unit < Day || a.Unit > Year:
		return fmt.Errorf("%w: Unit must be Day, Week, Month or Year, got %v", ErrInvalidConfig, a.Unit)
	case a.WeekStart < time.Sunday || a.WeekStart > time.Saturday:
		return fmt.Errorf("%w: WeekStart must be time.Sunday to time.Saturday, got %d", ErrInvalidConfig, int(a.WeekStart))
	case a.WeekStart != time.Sunday && a.Unit != Week:
		return fmt.Errorf("%w: WeekStart is for Unit Week only, got %v with Unit %v", ErrInvalidConfig, a.WeekStart, a.Unit)
	case a.Offset < 0 || a.Offset >= 24*time.Hour:
		return fmt.Errorf("%w: Offset must be at least 0 and below 24h, got %v", ErrInvalidConfig, a.Offset)
	case a.Offset%time.Second != 0:
		return fmt.Errorf("%w: Offset must be a whole number of seconds, got %v", ErrInvalidConfig, a.Offset)
	}
	return nil
}

// Policy returns Limit units per the unit's longest civil length without
// clock shifts (see CalendarWindow), or the zero Policy for an invalid
// configuration.
func (a CalendarWindow) Policy() Policy {
	if a.Validate() != nil {
		return Policy{}
	}
	days := time.Duration(1) // Day
	switch a.Unit {
	case Week:
		days = 7
	case Month:
		days = 31
	case Year:
		days = 366
	}
	return Policy{Quota: a.Limit, Window: days * 24 * time.Hour}
}

func (CalendarWindow) algorithm() {}

// String describes the configuration, e.g. "CalendarWindow{1000000 per
// month in Asia/Tokyo from 08:00:00}".
func (a CalendarWindow) String() string {
	s := fmt.Sprintf("CalendarWindow{%d per %v in %s", a.Limit, a.Unit, a.location())
	if a.Unit == Week {
		s += " from " + a.WeekStart.String()
	}
	if a.Offset != 0 {
		o := int(a.Offset / time.Second)
		s += fmt.Sprintf(" at %02d:%02d:%02d", o/3600, o/60%60, o%60)
	}
	return s + "}"
}

func (a CalendarWindow) location() *time.Location {
	if a.Location == nil {
		return time.UTC
	}
	return a.Location
}

// Window returns the window holding t: its first instant and the first
// instant of the next one, start ≤ t < end, in Location. It returns zero
// times for an invalid configuration.
func (a CalendarWindow) Window(t time.Time) (start, end time.Time) {
	if a.Validate() != nil {
		return time.Time{}, time.Time{}
	}
	loc := a.location()
	y, m, d := t.In(loc).Date()
	p := a.first(civilDate{y, m, d})
	b := a.boundary(p)
	for b.After(t) {
		p = a.step(p, -1)
		b = a.boundary(p)
	}
	q := a.step(p, 1)
	e := a.boundary(q)
	for !e.After(t) {
		b = e
		q = a.step(q, 1)
		e = a.boundary(q)
	}
	return b, e
}

// civilDate is a date of the proleptic Gregorian calendar.
type civilDate struct {
	y int
	m time.Month
	d int
}

// first returns the first date of the window whose dates include c.
func (a CalendarWindow) first(c civilDate) civilDate {
	switch a.Unit {
	case Day:
		return c
	case Week:
		back := (int(time.Date(c.y, c.m, c.d, 0, 0, 0, 0, time.UTC).Weekday()) - int(a.WeekStart) + 7) % 7
		return addDays(c, -back)
	case Month:
		return civilDate{c.y, c.m, 1}
	}
	return civilDate{c.y, time.January, 1}
}

// step returns the first date of the window k windows after the one
// starting on date c (k = ±1).
func (a CalendarWindow) step(c civilDate, k int) civilDate {
	switch a.Unit {
	case Day:
		return addDays(c, k)
	case Week:
		return addDays(c, 7*k)
	case Month:
		t := time.Date(c.y, c.m+time.Month(k), 1, 0, 0, 0, 0, time.UTC)
		return civilDate{t.Year(), t.Month(), 1}
	}
	return civilDate{c.y + k, time.January, 1}
}

func addDays(c civilDate, k int) civilDate {
	y, m, d := time.Date(c.y, c.m, c.d+k, 0, 0, 0, 0, time.UTC).Date()
	return civilDate{y, m, d}
}

// boundary returns the first instant at which Location's clock reads the
// reset time on date c, or later.
func (a CalendarWindow) boundary(c civilDate) time.Time {
	loc := a.location()
	off := int(a.Offset / time.Second)
	h, mi, s := off/3600, off/60%60, off%60
	want := time.Date(c.y, c.m, c.d, h, mi, s, 0, time.UTC).Unix()
	u := time.Date(c.y, c.m, c.d, h, mi, s, 0, loc)
	switch got := wallSeconds(u, loc); {
	case got > want:
		// In a gap, resolved after it: the gap ends where u's zone
		// period starts. Walk back while an earlier period still reads
		// the reset time or later (periods of no length, back-to-back
		// transitions).
		for {
			zs, _ := u.ZoneBounds()
			if zs.IsZero() || !zs.Before(u) {
				return u
			}
			if wallSeconds(zs.Add(-time.Second), loc) < want {
				return zs
			}
			u = zs.Add(-time.Second)
		}
	case got < want:
		// In a gap, resolved before it: the gap ends where u's zone
		// period ends.
		for {
			_, ze := u.ZoneBounds()
			if ze.IsZero() {
				return u
			}
			if wallSeconds(ze, loc) >= want {
				return ze
			}
			u = ze
		}
	}
	// The reset time exists; when clocks went back over it, it occurs
	// twice, and the first occurrence is the boundary.
	if zs, _ := u.ZoneBounds(); !zs.IsZero() {
		_, before := zs.Add(-time.Second).Zone()
		_, now := u.Zone()
		if before > now {
			if v := u.Add(-time.Duration(before-now) * time.Second); v.Before(zs) && wallSeconds(v, loc) == want {
				return v
			}
		}
	}
	return u
}

// wallSeconds returns the reading of loc's clock at t as seconds of a
// UTC calendar, so that readings compare as numbers.
func wallSeconds(t time.Time, loc *time.Location) int64 {
	l := t.In(loc)
	y, m, d := l.Date()
	return time.Date(y, m, d, l.Hour(), l.Minute(), l.Second(), 0, time.UTC).Unix()
}
