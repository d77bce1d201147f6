package region_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
)

// TestConformance runs floodgatetest's conservative tier on region Stores
// of one region that holds the whole quota (a floor of 1), over one
// memstore; the fleet is several processes of that region sharing its
// local store, each with its own Store. The Stores bind FixedWindow,
// CalendarWindow and TokenBucket (split as windows of half its burst; the
// other algorithms are skipped at Bind) and never reconcile here: what
// the tier checks is the decisions' path (the limit, the window check,
// the OpSettle and MaxDelay rules), which must never admit what the
// algorithm itself would deny.
func TestConformance(t *testing.T) {
	regions := []region.Region{{Name: "only", Floor: 1}}
	newStore := func(t *testing.T, local floodgate.Store, now func() time.Time) floodgate.Store {
		t.Helper()
		coord, err := region.NewMemCoordinator(regions)
		if err != nil {
			t.Fatal(err)
		}
		opts := &region.Options{Manual: true, Interval: 10 * time.Millisecond, Margin: time.Millisecond, Now: now}
		s, err := region.New(local, coord, regions, "only", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return unclosed{s}
	}
	newLocal := func(t *testing.T, now func() time.Time) floodgate.Store {
		t.Helper()
		var mo *memstore.Options
		if now != nil {
			mo = &memstore.Options{Now: now}
		}
		s, err := memstore.New(mo)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newStore(t, newLocal(t, now), now)
	}, &floodgatetest.Options{
		Conservative: true,
		// A TokenBucket splits as windows of Burst/2 units: the first
		// denial may come after Burst/2 of a full bucket's Burst.
		UnderAdmission: func(alg floodgate.Algorithm, _ int) int64 {
			if tb, ok := alg.(floodgate.TokenBucket); ok {
				return tb.Burst - tb.Burst/2
			}
			return 0
		},
		Fleet: func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
			local := newLocal(t, now)
			ss := make([]floodgate.Store, n)
			for i := range ss {
				ss[i] = newStore(t, local, now)
			}
			return ss
		},
	})
}

// unclosed is a Store without its Close method, so that floodgatetest.Run
// does not run its Close case on it: that case binds every algorithm, and
// a region Store binds only windows and token buckets. TestClose checks
// Close.
type unclosed struct{ floodgate.Store }
