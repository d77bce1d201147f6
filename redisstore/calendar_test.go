package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/testkit"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/step"
)

// calendarStores returns a memstore, a store on the standalone Redis (or a
// miniredis) and one on the Cluster (when REDIS_CLUSTER_ADDRS is set), all
// on the clock now.
func calendarStores(t *testing.T, now func() time.Time) map[string]floodgate.Store {
	t.Helper()
	stores := map[string]floodgate.Store{"memstore": testkit.Mem(t, now)}
	for _, cluster := range []bool{false, true} {
		name := "redis"
		if cluster {
			name = "cluster"
			if os.Getenv("REDIS_CLUSTER_ADDRS") == "" {
				continue
			}
		}
		mk, _ := testkit.Clients(t, cluster)
		c := mk()
		s, err := redisstore.New(c, &redisstore.Options{Prefix: testkit.Prefix(t, c, "calendar"), Now: now, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[name] = s
	}
	return stores
}

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarWindowBoundaries takes a window's Limit just before each
// boundary of the cases, on every store, and checks to the
// nanosecond that the quota comes back at the boundary and not 1 ns
// before, that RetryAfter and ResetAfter name the boundary, and that
// every Result is the reference transition's (step.CalendarWindow, run on
// a state of the test's own).
func TestCalendarWindowBoundaries(t *testing.T) {
	ny, ldn, kat, lh, apia, tokyo := zone(t, "America/New_York"), zone(t, "Europe/London"), zone(t, "Asia/Kathmandu"),
		zone(t, "Australia/Lord_Howe"), zone(t, "Pacific/Apia"), zone(t, "Asia/Tokyo")
	cases := []struct {
		a  floodgate.CalendarWindow
		at time.Time // an instant in the window before the boundary checked
	}{
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: ny}, time.Date(2026, 3, 8, 12, 0, 0, 0, ny)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: ny}, time.Date(2026, 11, 1, 12, 0, 0, 0, ny)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: ny, Offset: 150 * time.Minute}, time.Date(2026, 3, 7, 12, 0, 0, 0, ny)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: ldn, Offset: 90 * time.Minute}, time.Date(2026, 3, 28, 12, 0, 0, 0, ldn)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: kat}, time.Date(2026, 12, 31, 12, 0, 0, 0, kat)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: lh}, time.Date(2026, 4, 5, 12, 0, 0, 0, lh)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Day, Location: apia}, time.Date(2011, 12, 29, 12, 0, 0, 0, apia)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Month}, time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Month}, time.Date(2028, 2, 10, 0, 0, 0, 0, time.UTC)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Month, Location: tokyo, Offset: 8 * time.Hour}, time.Date(2026, 4, 10, 0, 0, 0, 0, tokyo)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Month, Location: ny}, time.Date(2026, 12, 10, 0, 0, 0, 0, ny)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Year, Location: tokyo}, time.Date(2026, 7, 1, 0, 0, 0, 0, tokyo)},
		{floodgate.CalendarWindow{Limit: 3, Unit: floodgate.Week, WeekStart: time.Monday, Offset: 8 * time.Hour, Location: ldn}, time.Date(2026, 3, 25, 0, 0, 0, 0, ldn)},
	}
	clock := floodgatetest.NewClock(cases[0].at)
	ctx := context.Background()
	for name, st := range calendarStores(t, clock.Now) {
		for i, c := range cases {
			b, err := st.Bind(fmt.Sprintf("cal%d", i), c.a)
			if err != nil {
				t.Fatalf("%s: Bind(%v): %v", name, c.a, err)
			}
			_, boundary := c.a.Window(c.at)
			_, after := c.a.Window(boundary)
			key := "k"
			var ref step.FixedWindowState
			apply := func(at time.Time, req floodgate.Request) floodgate.Result {
				t.Helper()
				clock.Set(at)
				got, err := b.Apply(ctx, key, req, nil)
				if err != nil {
					t.Fatalf("%s %v at %v: %v", name, c.a, at, err)
				}
				next, want, _ := step.CalendarWindow(c.a, ref, at, req)
				if !req.Check {
					ref = next
				}
				if got.Decision != want.Decision || got.Granted != want.Granted || !got.At.Equal(want.At) {
					t.Fatalf("%s %v at %v, %+v:\n got %+v\nwant %+v", name, c.a, at, req, got, want)
				}
				return got
			}
			take := floodgate.Request{Op: floodgate.OpTake, N: 1}
			before := boundary.Add(-2 * time.Second)
			for range c.a.Limit {
				if r := apply(before, take); !r.Allowed || r.ResetAfter != boundary.Sub(before) {
					t.Fatalf("%s %v: take at %v = %+v, want admitted until %v", name, c.a, before, r, boundary)
				}
			}
			if r := apply(before, take); r.Allowed || r.RetryAfter != boundary.Sub(before) {
				t.Fatalf("%s %v: take at %v over the limit = %+v, want RetryAfter %v", name, c.a, before, r, boundary.Sub(before))
			}
			if r := apply(boundary.Add(-1), take); r.Allowed || r.RetryAfter != 1 {
				t.Fatalf("%s %v: take 1 ns before the boundary = %+v, want denied for 1ns", name, c.a, r)
			}
			if r := apply(boundary, take); !r.Allowed || r.ResetAfter != after.Sub(boundary) || r.Remaining != c.a.Limit-1 {
				t.Fatalf("%s %v: take at the boundary %v = %+v, want admitted until %v", name, c.a, boundary, r, after)
			}
			// A reservation into the next window, and a settlement.
			for range c.a.Limit - 1 {
				apply(boundary, take)
			}
			r := apply(boundary, floodgate.Request{Op: floodgate.OpTake, N: 2, MaxDelay: floodgate.MaxDelay})
			if d := after.Sub(boundary); d <= floodgate.MaxDelay && (!r.Allowed || r.Delay != d) {
				t.Fatalf("%s %v: reservation = %+v, want a delay of %v", name, c.a, r, d)
			}
			apply(boundary.Add(time.Second), floodgate.Request{Op: floodgate.OpSettle, N: -1, At: boundary})
			apply(boundary.Add(time.Second), floodgate.Request{Op: floodgate.OpTakeUpTo, N: 5})
			apply(boundary.Add(time.Second), floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true})
		}
	}
}

// TestCalendarWindowYear runs a year-long window (and a Limits of it with
// a per-hour token bucket) through a full simulated year and a half, every
// 6 hours, on every store: each calendar year admits exactly its Limit,
// and the first take of a new year is admitted at its first instant.
func TestCalendarWindowYear(t *testing.T) {
	tokyo := zone(t, "Asia/Tokyo")
	year := floodgate.CalendarWindow{Limit: 1000, Unit: floodgate.Year, Location: tokyo}
	algs := []floodgate.Algorithm{year, floodgate.Limits{floodgate.TokenBucket{Rate: 100, Per: time.Hour, Burst: 100}, year}}
	start := time.Date(2026, 12, 31, 0, 0, 0, 0, tokyo)
	clock := floodgatetest.NewClock(start)
	ctx := context.Background()
	for name, st := range calendarStores(t, clock.Now) {
		for i, alg := range algs {
			lim, err := floodgate.New(st, alg, &floodgate.Options{Name: fmt.Sprintf("year%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			admitted := map[int]int64{}
			steps := 0
			for at := start; at.Before(time.Date(2028, 7, 1, 0, 0, 0, 0, tokyo)); at = at.Add(6 * time.Hour) {
				clock.Set(at)
				d, err := lim.AllowN(ctx, "k", 5)
				if err != nil {
					t.Fatalf("%s %v at %v: %v", name, alg, at, err)
				}
				if d.Allowed {
					admitted[at.In(tokyo).Year()] += 5
				}
				_, end := year.Window(at)
				if d.ResetAfter > end.Sub(at) && i == 0 {
					t.Fatalf("%s: ResetAfter %v past the year's end %v", name, d.ResetAfter, end)
				}
				steps++
			}
			// 2026: one day (4 takes); 2027: 1460 takes, 200 of which fit;
			// 2028: half a year, 200 fit.
			if admitted[2026] != 20 || admitted[2027] != 1000 || admitted[2028] != 1000 {
				t.Fatalf("%s %v: admitted per year %v over %d steps, want 20, 1000, 1000", name, alg, admitted, steps)
			}
		}
	}
}

// TestCalendarWindowSkewedClient decides around a reset a few seconds from
// now, in Asia/Tokyo, on Redis TIME, from clients whose clocks (the
// boundaries' clock) are 10 s behind, exact and 10 s ahead of the
// server's, from several goroutines each: every decision's ResetAfter
// ends at the window the server's clock is in, and each window admits
// exactly its Limit, in all three runs alike.
func TestCalendarWindowSkewedClient(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a reset 3 s away")
	}
	tokyo := zone(t, "Asia/Tokyo")
	ctx := context.Background()
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "redis", true: "cluster"}[cluster], func(t *testing.T) {
			mk, _ := testkit.Clients(t, cluster)
			c := mk()
			prefix := testkit.Prefix(t, c, "calskew")
			// The reset: 3 s from now, in whole seconds of Tokyo's clock.
			now := time.Now().In(tokyo)
			reset := now.Truncate(time.Second).Add(3 * time.Second)
			midnight := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, tokyo)
			a := floodgate.CalendarWindow{Limit: 50, Unit: floodgate.Day, Location: tokyo, Offset: reset.Sub(midnight) % (24 * time.Hour)}
			if s, e := a.Window(reset); !s.Equal(reset) {
				t.Skipf("the reset %v is not a boundary (%v, %v): around midnight, try again", reset, s, e)
			}
			type run struct {
				skew     time.Duration
				admitted [2]int64
			}
			runs := []*run{{skew: -10 * time.Second}, {skew: 0}, {skew: 10 * time.Second}}
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			var mu sync.Mutex
			for _, r := range runs {
				s, err := redisstore.New(mk(), &redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second,
					CalendarClock: func() time.Time { return time.Now().Add(r.skew) }})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				lim, err := floodgate.New(s, a, &floodgate.Options{Name: fmt.Sprintf("skew%v", r.skew)})
				if err != nil {
					t.Fatal(err)
				}
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(reset.Add(time.Second)) {
							res, err := lim.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
							if err != nil {
								errs <- err
								return
							}
							w := 0
							if !res.At.Before(reset) {
								w = 1
							}
							if want := map[int]time.Time{0: reset, 1: reset.Add(24 * time.Hour)}[w]; res.Allowed && !res.At.Add(res.ResetAfter).Equal(want) {
								errs <- fmt.Errorf("skew %v: admitted at %v with ResetAfter %v, want the window to end at %v", r.skew, res.At, res.ResetAfter, want)
								return
							}
							if res.Allowed {
								mu.Lock()
								r.admitted[w]++
								mu.Unlock()
							}
							time.Sleep(2 * time.Millisecond)
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for _, r := range runs {
				if r.admitted != [2]int64{a.Limit, a.Limit} {
					t.Errorf("skew %v: admitted %v before and after the reset, want %d each", r.skew, r.admitted, a.Limit)
				}
			}
		})
	}
}

// TestCalendarWindowApartFromFixed binds a FixedWindow of a day and a
// CalendarWindow of a UTC day under one name, whose windows start at the
// same instant: each counts its own (the calendar window is of a kind of
// its own, step.KindCalendarWindow, with its own Redis key), on every
// store. When they shared the fixed window's state, the fixed window's
// TTL, which ends with its own window, could drop units the calendar
// window still counted; here the calendar window admits its whole Limit
// after the fixed window has spent its own.
func TestCalendarWindowApartFromFixed(t *testing.T) {
	midnight := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	clock := floodgatetest.NewClock(midnight.Add(time.Hour))
	ctx := context.Background()
	fixed := floodgate.FixedWindow{Limit: 5, Window: 24 * time.Hour}
	cal := floodgate.CalendarWindow{Limit: 5, Unit: floodgate.Day, Location: time.UTC}
	for name, st := range calendarStores(t, clock.Now) {
		fl, err := floodgate.New(st, fixed, &floodgate.Options{Name: "apart"})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := floodgate.New(st, cal, &floodgate.Options{Name: "apart"})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := fl.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
			t.Fatalf("%s: the fixed window's 5: %+v, %v", name, d, err)
		}
		d, err := cl.AllowN(ctx, "k", 5)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: the calendar window's 5 after the fixed window's: %+v, %v; want admitted, its own count", name, d, err)
		}
		if d, err := cl.AllowN(ctx, "k", 1); err != nil || d.Allowed {
			t.Fatalf("%s: a sixth unit of the calendar window: %+v, %v; want denied", name, d, err)
		}
		if d, err := fl.AllowN(ctx, "k", 1); err != nil || d.Allowed {
			t.Fatalf("%s: a sixth unit of the fixed window: %+v, %v; want denied", name, d, err)
		}
		if rs, ok := st.(*redisstore.Store); ok {
			if a, b := rs.Key("apart", "k", step.KindFixedWindow), rs.Key("apart", "k", step.KindCalendarWindow); a == b {
				t.Fatalf("%s: one Redis key %q for both kinds", name, a)
			}
		}
	}
}
