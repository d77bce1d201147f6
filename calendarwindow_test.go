package floodgate_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// oracleBoundary finds, by scanning Go's own conversions, the first
// instant at which loc's clock reads the wall time (y, m, d, off) or later:
// minute by minute from 30 hours before, then second by second.
func oracleBoundary(y int, m time.Month, d int, off time.Duration, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(off)
	reads := func(t time.Time) bool {
		l := t.In(loc)
		w := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
		return !w.Before(want)
	}
	t := want.Add(-30 * time.Hour)
	for !reads(t) {
		t = t.Add(time.Minute)
	}
	t = t.Add(-time.Minute)
	for !reads(t) {
		t = t.Add(time.Second)
	}
	return t
}

// oracleWindow returns the window holding t from the oracle's boundaries
// of every candidate first date near t.
func oracleWindow(a floodgate.CalendarWindow, t time.Time) (time.Time, time.Time) {
	loc := a.Location
	if loc == nil {
		loc = time.UTC
	}
	l := t.In(loc)
	var dates []time.Time // first dates, as UTC midnights
	base := time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, time.UTC)
	switch a.Unit {
	case floodgate.Day:
		for k := -3; k <= 3; k++ {
			dates = append(dates, base.AddDate(0, 0, k))
		}
	case floodgate.Week:
		for k := -21; k <= 21; k++ {
			if d := base.AddDate(0, 0, k); d.Weekday() == a.WeekStart {
				dates = append(dates, d)
			}
		}
	case floodgate.Month:
		for k := -2; k <= 2; k++ {
			dates = append(dates, time.Date(l.Year(), l.Month()+time.Month(k), 1, 0, 0, 0, 0, time.UTC))
		}
	case floodgate.Year:
		for k := -1; k <= 1; k++ {
			dates = append(dates, time.Date(l.Year()+k, 1, 1, 0, 0, 0, 0, time.UTC))
		}
	}
	var start, end time.Time
	for _, d := range dates {
		b := oracleBoundary(d.Year(), d.Month(), d.Day(), a.Offset, loc)
		if !b.After(t) && (start.IsZero() || b.After(start)) {
			start = b
		}
		if b.After(t) && (end.IsZero() || b.Before(end)) {
			end = b
		}
	}
	return start, end
}

// TestCalendarWindowVectors checks the windows of the cases
// against instants worked out by hand (UTC), and against the oracle.
func TestCalendarWindowVectors(t *testing.T) {
	ny, kat, lh, apia, ldn, tokyo := mustZone(t, "America/New_York"), mustZone(t, "Asia/Kathmandu"),
		mustZone(t, "Australia/Lord_Howe"), mustZone(t, "Pacific/Apia"), mustZone(t, "Europe/London"), mustZone(t, "Asia/Tokyo")
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name       string
		a          floodgate.CalendarWindow
		at         string
		start, end string
	}{
		{"NY spring-forward day is 23h", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: ny}, "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		{"NY fall-back day is 25h", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: ny}, "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"NY reset 02:30 in the gap resets at 03:00 EDT", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: ny, Offset: 150 * time.Minute}, "2026-03-08T12:00:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"},
		{"NY reset 01:30 twice resets at the first", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: ny, Offset: 90 * time.Minute}, "2026-11-01T12:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		{"London spring-forward", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: ldn}, "2026-03-29T12:00:00Z", "2026-03-29T00:00:00Z", "2026-03-29T23:00:00Z"},
		{"London 01:30 reset in the gap", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: ldn, Offset: 90 * time.Minute}, "2026-03-29T12:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		{"Kathmandu +5:45", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: kat}, "2026-01-01T00:00:00Z", "2025-12-31T18:15:00Z", "2026-01-01T18:15:00Z"},
		{"Lord Howe 24.5h day", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: lh}, "2026-04-05T00:00:00Z", "2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z"},
		{"Apia skipped 30 Dec 2011", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Day, Location: apia}, "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{"Feb 2027 has 28 days", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Month}, "2027-02-14T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"},
		{"Feb 2028 has 29 days", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Month}, "2028-02-29T23:59:59Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"April has 30 days", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Month, Location: tokyo}, "2026-04-30T14:59:59Z", "2026-03-31T15:00:00Z", "2026-04-30T15:00:00Z"},
		{"January has 31 days", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Month, Location: tokyo}, "2026-01-31T14:00:00Z", "2025-12-31T15:00:00Z", "2026-01-31T15:00:00Z"},
		{"Tokyo year end", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Year, Location: tokyo}, "2026-12-31T14:59:59Z", "2025-12-31T15:00:00Z", "2026-12-31T15:00:00Z"},
		{"Tokyo new year", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Year, Location: tokyo}, "2026-12-31T15:00:00Z", "2026-12-31T15:00:00Z", "2027-12-31T15:00:00Z"},
		{"ISO week from Monday 08:00", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Week, WeekStart: time.Monday, Offset: 8 * time.Hour}, "2026-12-05T12:00:00Z", "2026-11-30T08:00:00Z", "2026-12-07T08:00:00Z"},
		{"Monday before 08:00 is last week", floodgate.CalendarWindow{Limit: 1, Unit: floodgate.Week, WeekStart: time.Monday, Offset: 8 * time.Hour}, "2026-12-07T07:59:59Z", "2026-11-30T08:00:00Z", "2026-12-07T08:00:00Z"},
	}
	for _, c := range cases {
		at := utc(c.at)
		start, end := c.a.Window(at)
		if !start.Equal(utc(c.start)) || !end.Equal(utc(c.end)) {
			t.Errorf("%s: Window(%s) = [%s, %s), want [%s, %s)", c.name, c.at, start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano), c.start, c.end)
		}
		os, oe := oracleWindow(c.a, at)
		if !start.Equal(os) || !end.Equal(oe) {
			t.Errorf("%s: Window(%s) = [%s, %s), the oracle [%s, %s)", c.name, c.at, start.UTC(), end.UTC(), os.UTC(), oe.UTC())
		}
	}
}

// TestCalendarWindowOracle checks Window against the oracle at random
// instants in zones with unusual offsets and shifts, and that windows
// tile time: the window of start is the same, the window of end starts at
// end, and end − 1 ns is still inside.
func TestCalendarWindowOracle(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/London", "Asia/Kathmandu", "Australia/Lord_Howe",
		"Pacific/Apia", "Asia/Tokyo", "America/Santiago", "Antarctica/Troll", "Asia/Tehran", "Pacific/Chatham", "Africa/Casablanca"}
	r := rand.New(rand.NewPCG(1, 2))
	n := 40
	if testing.Short() {
		n = 10
	}
	lo, hi := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, z := range zones {
		loc := mustZone(t, z)
		for i := range n {
			a := floodgate.CalendarWindow{Limit: 1, Unit: floodgate.CalendarUnit(1 + i%4), Location: loc}
			if a.Unit == floodgate.Week {
				a.WeekStart = time.Weekday(r.IntN(7))
			}
			if r.IntN(2) == 0 {
				a.Offset = time.Duration(r.IntN(24*3600)) * time.Second
			}
			at := time.Unix(0, lo+r.Int64N(hi-lo))
			start, end := a.Window(at)
			os, oe := oracleWindow(a, at)
			if !start.Equal(os) || !end.Equal(oe) {
				t.Fatalf("%v: Window(%v) = [%v, %v), the oracle [%v, %v)", a, at.UTC(), start.UTC(), end.UTC(), os.UTC(), oe.UTC())
			}
			if s2, e2 := a.Window(start); !s2.Equal(start) || !e2.Equal(end) {
				t.Fatalf("%v: Window(start %v) = [%v, %v), want the same window", a, start.UTC(), s2.UTC(), e2.UTC())
			}
			if s2, _ := a.Window(end); !s2.Equal(end) {
				t.Fatalf("%v: Window(end %v) starts at %v", a, end.UTC(), s2.UTC())
			}
			if s2, _ := a.Window(end.Add(-1)); !s2.Equal(start) {
				t.Fatalf("%v: Window(end − 1ns) starts at %v, want %v", a, s2.UTC(), start.UTC())
			}
		}
	}
}

func TestCalendarWindowValidate(t *testing.T) {
	bad := []floodgate.CalendarWindow{
		{},
		{Limit: 1},
		{Limit: 0, Unit: floodgate.Day},
		{Limit: 1 << 54, Unit: floodgate.Day},
		{Limit: 1, Unit: floodgate.Year + 1},
		{Limit: 1, Unit: floodgate.Day, WeekStart: time.Monday},
		{Limit: 1, Unit: floodgate.Week, WeekStart: 7},
		{Limit: 1, Unit: floodgate.Week, WeekStart: -1},
		{Limit: 1, Unit: floodgate.Day, Offset: -time.Second},
		{Limit: 1, Unit: floodgate.Day, Offset: 24 * time.Hour},
		{Limit: 1, Unit: floodgate.Day, Offset: time.Millisecond},
	}
	for _, a := range bad {
		if err := a.Validate(); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalidConfig", a, err)
		}
		if p := a.Policy(); p != (floodgate.Policy{}) {
			t.Errorf("%+v: Policy() = %+v, want zero", a, p)
		}
		if s, e := a.Window(time.Now()); !s.IsZero() || !e.IsZero() {
			t.Errorf("%+v: Window = %v, %v, want zero times", a, s, e)
		}
	}
	good := floodgate.CalendarWindow{Limit: 1_000_000, Unit: floodgate.Month, Location: mustZone(t, "Asia/Tokyo"), Offset: 8 * time.Hour}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := good.Policy(); p.Quota != 1_000_000 || p.Window != 31*24*time.Hour {
		t.Fatalf("Policy() = %+v", p)
	}
	if s := good.String(); s != "CalendarWindow{1000000 per month in Asia/Tokyo at 08:00:00}" {
		t.Fatalf("String() = %q", s)
	}
}

// FuzzCalendarWindow checks that any configuration either fails to
// validate or gives windows that hold the instant, never panicking.
func FuzzCalendarWindow(f *testing.F) {
	f.Add(int64(1), uint8(1), uint8(0), int64(0), int64(0), "UTC")
	f.Add(int64(5), uint8(3), uint8(1), int64(3600e9), int64(1767225600e9), "America/New_York")
	f.Add(int64(5), uint8(2), uint8(6), int64(-1), int64(-1), "Pacific/Apia")
	f.Fuzz(func(t *testing.T, limit int64, unit, ws uint8, off, at int64, zone string) {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return
		}
		a := floodgate.CalendarWindow{Limit: limit, Unit: floodgate.CalendarUnit(unit), WeekStart: time.Weekday(ws), Offset: time.Duration(off), Location: loc}
		if a.Validate() != nil {
			return
		}
		now := time.Unix(0, at)
		s, e := a.Window(now)
		if s.After(now) || !e.After(now) {
			t.Fatalf("%v: Window(%v) = [%v, %v) does not hold it", a, now, s, e)
		}
	})
}
