package lease_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestSubWindowsLeased: two processes' lease Stores over one memstore, on
// one virtual clock, serving a sliding window with sub-windows: the units
// they hand out, at the instants they hand them out, never exceed Limit in
// any interval of Window. Pools end with the sub-window their units were
// counted in, so a unit is used while the remote counts it as admitted
// then. Batches of 10 used over about 200 ms span sub-window boundaries:
// pools that lived to the end of the whole window would break the bound.
func TestSubWindowsLeased(t *testing.T) {
	clock := floodgatetest.NewClock(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	mem, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	a := floodgate.SlidingWindow{Limit: 40, Window: time.Second, SubWindows: 4}
	var lims []*floodgate.Limiter
	for range 2 {
		ls, err := lease.New(mem, &lease.Options{Now: clock.Now, MinBatch: 10, MaxBatch: 10})
		require.NoError(t, err)
		t.Cleanup(func() { _ = ls.Close() })
		lim, err := floodgate.New(ls, a, &floodgate.Options{Name: "leased"})
		require.NoError(t, err)
		lims = append(lims, lim)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var at []time.Time
	ctx := context.Background()
	for range 5_000 {
		clock.Advance(time.Duration(rng.Int64N(int64(40 * time.Millisecond))))
		d, err := lims[rng.IntN(2)].Allow(ctx, "k")
		require.NoError(t, err)
		if d.Allowed {
			at = append(at, clock.Now())
		}
	}
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	most, lo := 0, 0
	for i := range at {
		for at[lo].Before(at[i].Add(-a.Window)) {
			lo++
		}
		most = max(most, i-lo+1)
	}
	t.Logf("%d admitted over %v, at most %d in one window of %v", len(at), clock.Now().Sub(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)), most, a.Window)
	require.LessOrEqual(t, most, int(a.Limit), "units handed out within one window")
	require.Greater(t, len(at), 400, "the window slid and admitted again")
}

// TestSubWindowsLeasePoolEnds is the case the sub-window expiry is for: a
// process leases 10 units at the start of a window and would use 9 of them
// 0.9 s later, when the remote has them counted in the first sub-window
// only; another process then takes what the remote has at 1.3 s, once that
// sub-window has left. With pools that lived to the end of the window the
// second second would hand out 49 units within one window of 40.
func TestSubWindowsLeasePoolEnds(t *testing.T) {
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	clock := floodgatetest.NewClock(start)
	mem, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	a := floodgate.SlidingWindow{Limit: 40, Window: time.Second, SubWindows: 4}
	ls, err := lease.New(mem, &lease.Options{Now: clock.Now, MinBatch: 10, MaxBatch: 10, TTL: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ls.Close() })
	first, err := floodgate.New(ls, a, &floodgate.Options{Name: "leased"})
	require.NoError(t, err)
	other, err := floodgate.New(mem, a, &floodgate.Options{Name: "leased"})
	require.NoError(t, err)
	ctx := context.Background()
	var at []time.Time
	take := func(lim *floodgate.Limiter, n int) {
		for range n {
			d, err := lim.Allow(ctx, "k")
			require.NoError(t, err)
			if d.Allowed {
				at = append(at, clock.Now())
			}
		}
	}
	take(first, 1) // leases 10
	clock.Advance(900 * time.Millisecond)
	take(first, 9)
	clock.Advance(400 * time.Millisecond)
	take(other, 40)
	most, lo := 0, 0
	for i := range at {
		for at[lo].Before(at[i].Add(-a.Window)) {
			lo++
		}
		most = max(most, i-lo+1)
	}
	require.LessOrEqual(t, most, int(a.Limit), "units handed out within one window, of %d", len(at))
}
