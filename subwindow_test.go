package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestSubWindowsValidate: every bad sub-window configuration is refused with
// ErrInvalidConfig and a message naming what is wrong; the good ones pass,
// up to a year.
func TestSubWindowsValidate(t *testing.T) {
	year := 365 * 24 * time.Hour
	bad := []struct {
		a    floodgate.SlidingWindow
		want string
	}{
		{floodgate.SlidingWindow{Limit: 1, Window: time.Second, SubWindows: -1}, "SubWindows"},
		{floodgate.SlidingWindow{Limit: 1, Window: time.Second, SubWindows: 65}, "SubWindows"},
		{floodgate.SlidingWindow{Limit: 1, Window: time.Second, SubWindows: 3}, "sub-windows of a whole number of microseconds"},
		{floodgate.SlidingWindow{Limit: 1, Window: 7 * time.Microsecond, SubWindows: 2}, "sub-windows"},
		{floodgate.SlidingWindow{Limit: 1, Window: 368 * 24 * time.Hour, SubWindows: 2}, "longest"},
		{floodgate.SlidingWindow{Limit: 1, Window: year}, "MaxWindow"},
		{floodgate.SlidingWindow{Limit: 0, Window: time.Second, SubWindows: 4}, "Limit"},
		{floodgate.SlidingWindow{Limit: 1, Window: 0, SubWindows: 4}, "Window"},
		{floodgate.SlidingWindow{Limit: 1, Window: -time.Second, SubWindows: 4}, "Window"},
	}
	for _, c := range bad {
		err := c.a.Validate()
		if !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalidConfig mentioning %q", c.a, err, c.want)
		}
		if p := c.a.Policy(); p != (floodgate.Policy{}) {
			t.Errorf("%+v: Policy() = %v, want the zero Policy", c.a, p)
		}
	}
	good := []floodgate.SlidingWindow{
		{Limit: 1, Window: time.Second, SubWindows: 0},
		{Limit: 1, Window: time.Second, SubWindows: 1},
		{Limit: 1, Window: time.Second, SubWindows: 2},
		{Limit: 100, Window: time.Minute, SubWindows: 60},
		{Limit: 1, Window: 64 * time.Microsecond, SubWindows: 64},
		{Limit: 1_000_000, Window: 364 * 24 * time.Hour, SubWindows: 52},
		{Limit: 1, Window: 366 * 24 * time.Hour, SubWindows: 61},
	}
	for _, a := range good {
		if err := a.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v", a, err)
		}
		if p := a.Policy(); p.Quota != a.Limit || p.Window != a.Window {
			t.Errorf("%+v: Policy() = %v", a, p)
		}
	}
	a := floodgate.SlidingWindow{Limit: 100, Window: time.Minute, SubWindows: 60}
	if got := a.String(); got != "SlidingWindow{100 per 1m0s in 60}" {
		t.Errorf("String() = %q", got)
	}
	ls := floodgate.Limits{floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, &a}
	if err := ls.Validate(); !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.Contains(err.Error(), "sub-windows") {
		t.Errorf("a Limits holding sub-windows: Validate() = %v, want ErrInvalidConfig", err)
	}
}

// TestSubWindowsYear runs a year-long sliding window, counted by weeks, over
// a simulated year and a half on memstore: it never admits more than its
// Limit in any 364 days, and admits again as the weeks leave.
func TestSubWindowsYear(t *testing.T) {
	clock := floodgatetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := memstore.New(&memstore.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	subWindowsYear(t, s, clock)
}

// subWindowsYear is the year-long check on store s on clock: 1,000 units per
// 364 days in 52 weeks, one take of 10 units a day, with a burst of 300 in
// week 3.
func subWindowsYear(t *testing.T, s floodgate.Store, clock *floodgatetest.Clock) {
	t.Helper()
	a := floodgate.SlidingWindow{Limit: 1000, Window: 364 * 24 * time.Hour, SubWindows: 52}
	lim, err := floodgate.New(s, a, &floodgate.Options{Name: "yearly"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type adm struct {
		at time.Time
		n  int64
	}
	var adms []adm
	denied := 0
	start := clock.Now()
	for day := range 540 {
		n := int64(10)
		if day == 20 {
			n = 300
		}
		d, err := lim.AllowN(ctx, "tenant", n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			adms = append(adms, adm{clock.Now(), n})
		} else {
			denied++
			// A retry waits for the start of a week (sub-windows are
			// aligned to the Unix epoch).
			if at := clock.Now().Add(d.RetryAfter); d.RetryAfter <= 0 || at.UnixNano()%int64(a.Window/52) != 0 {
				t.Fatalf("day %d: RetryAfter %v, want the start of a later week", day, d.RetryAfter)
			}
		}
		clock.Advance(24 * time.Hour)
	}
	for i := range adms {
		var sum int64
		for j := i; j < len(adms) && !adms[j].at.After(adms[i].at.Add(a.Window)); j++ {
			sum += adms[j].n
		}
		if sum > a.Limit {
			t.Fatalf("%d units admitted in the 364 days from %v", sum, adms[i].at)
		}
	}
	// Days 0-19 and 21-: 10 a day fills the 1,000 (with the 300) by about
	// day 90, then the year admits nothing until the first weeks leave
	// (day 371 onwards), then about 10 a day again.
	var late int64
	for _, x := range adms {
		if x.at.Sub(start) > 380*24*time.Hour {
			late += x.n
		}
	}
	if denied < 200 || late == 0 {
		t.Fatalf("denied %d days, admitted %d units after day 380: the year did not fill, or did not reopen", denied, late)
	}
}
