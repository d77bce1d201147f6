package region

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// TestCalendarWindows checks the numbering of calendar windows against
// CalendarWindow.Window at random instants, in zones with clock shifts
// (including Lord Howe's half hour and the date Apia skipped): the window
// holding t starts at start(index(t)) and ends at start(index(t)+1), and
// the next window's index is one more.
func TestCalendarWindows(t *testing.T) {
	var locs []*time.Location
	for _, name := range []string{"UTC", "America/New_York", "Europe/Paris", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Skipf("no time zone database: %v", err)
		}
		locs = append(locs, loc)
	}
	locs = append(locs, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		cal := floodgate.CalendarWindow{Limit: 10, Unit: floodgate.CalendarUnit(1 + rng.IntN(4)), Location: locs[rng.IntN(len(locs))],
			Offset: time.Duration(rng.IntN(24*3600)) * time.Second}
		if rng.IntN(3) == 0 {
			cal.Offset = 0
		}
		if cal.Unit == floodgate.Week {
			cal.WeekStart = time.Weekday(rng.IntN(7))
		}
		w := newWindows(cal)
		at := time.Unix(rng.Int64N(80*365*86400)-10*365*86400, rng.Int64N(1e9))
		if rng.IntN(4) == 0 {
			at = time.Date(2011, 12, 29+rng.IntN(3), rng.IntN(24), 0, 0, 0, time.UTC) // Apia's skipped day
		}
		start, end := cal.Window(at)
		i := w.index(at)
		fresh := newWindows(cal) // without the cache
		if got := fresh.start(i); !got.Equal(start) {
			t.Fatalf("%v at %v: window %d starts at %v, want %v", cal, at, i, got, start)
		}
		if got := fresh.start(i + 1); !got.Equal(end) {
			// Only a skipped date may come between.
			if got2 := fresh.start(i + 2); !got.Equal(got2) || !got2.Equal(end) {
				t.Fatalf("%v at %v: window %d ends at %v, want %v", cal, at, i, got, end)
			}
		}
		if j := fresh.index(end); j != i+1 && j != i+2 {
			t.Fatalf("%v at %v: the next window is %d, want %d", cal, at, j, i+1)
		}
		if w.index(start) != i || w.index(end.Add(-time.Nanosecond)) != i {
			t.Fatalf("%v at %v: the window's bounds are not in window %d", cal, at, i)
		}
	}
}
