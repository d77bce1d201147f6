package lease_test

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
)

// TestFleetShare: a process's share is its water-filling share of the
// budget among the claims (two TargetIntervals of demand each), plus an
// equal part of what the claims leave, at least MinBatch.
func TestFleetShare(t *testing.T) {
	const target = 1.0 // a claim is 2·demand
	for _, tc := range []struct {
		name        string
		budget, min int64
		self        float64
		others      []float64
		want        int64
	}{
		{"alone", 100, 1, 5, nil, 100},
		{"claims fit: each its claim and half the rest", 100, 1, 5, []float64{10}, 10 + 35},
		{"short: the small claim whole", 100, 1, 5, []float64{50, 50}, 10},
		{"short: the big claim shares the rest", 100, 1, 50, []float64{5, 50}, 45},
		{"equal", 90, 1, 50, []float64{50, 50}, 30},
		{"rounded down", 100, 1, 50, []float64{50, 50}, 33},
		{"floor", 100, 7, 0, []float64{50, 50, 50, 50, 50}, 7},
		{"no demand anywhere: an equal part", 100, 1, 0, []float64{0, 0, 0}, 25},
	} {
		got := lease.FleetShare(tc.budget, tc.min, target, tc.self, tc.others)
		assert.Equal(t, tc.want, got, tc.name)
	}
	// The shares of processes that see the same demands add up to at most
	// the budget (each rounded down), and to at least budget − processes.
	demands := []float64{0, 1, 3, 7, 40, 40, 400, 1e6}
	for _, budget := range []int64{1, 16, 625, 100000} {
		sum := int64(0)
		for i, d := range demands {
			others := append(append([]float64{}, demands[:i]...), demands[i+1:]...)
			sum += lease.FleetShare(budget, 0, 1e-3, d, others)
		}
		assert.LessOrEqual(t, sum, budget, "budget %d", budget)
		assert.GreaterOrEqual(t, sum, budget-int64(len(demands)), "budget %d", budget)
	}
}

// TestMemFleet: the members of a MemFleet see each other's demands for a
// key, not their own, and not after the record's TTL.
func TestMemFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f, err := lease.NewMemFleet(time.Second, nil)
		require.NoError(t, err)
		a, b := f.Member(), f.Member()
		got, err := a.Demand(ctx, "api", "k", 5)
		require.NoError(t, err)
		assert.Empty(t, got)
		got, err = b.Demand(ctx, "api", "k", 7)
		require.NoError(t, err)
		assert.Equal(t, []float64{5}, got)
		got, err = b.Demand(ctx, "api", "other", 7)
		require.NoError(t, err)
		assert.Empty(t, got, "another key")
		got, err = b.Demand(ctx, "batch", "k", 7)
		require.NoError(t, err)
		assert.Empty(t, got, "another limiter")
		time.Sleep(time.Second)
		got, err = b.Demand(ctx, "api", "k", 8)
		require.NoError(t, err)
		assert.Empty(t, got, "a's record expired")
		got, err = a.Demand(ctx, "api", "k", 1)
		require.NoError(t, err)
		assert.Equal(t, []float64{8}, got)

		for _, d := range []float64{-1, math.NaN(), math.Inf(1)} {
			_, err := a.Demand(ctx, "api", "k", d)
			assert.ErrorIs(t, err, lease.ErrInvalidOptions, "%v", d)
		}
		_, err = lease.NewMemFleet(0, nil)
		assert.ErrorIs(t, err, lease.ErrInvalidOptions)

		// Keys no one records any more are dropped: the records stay
		// bounded however many keys pass through.
		for i := range 10000 {
			_, err := a.Demand(ctx, "api", strconv.Itoa(i), 1)
			require.NoError(t, err)
			if i%100 == 0 {
				time.Sleep(time.Second)
			}
		}
		assert.LessOrEqual(t, f.Records(), 1100)
	})
}

// TestFleetOptions: the fleet options need a Fleet and sane values.
func TestFleetOptions(t *testing.T) {
	r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Second})
	f, err := lease.NewMemFleet(time.Second, nil)
	require.NoError(t, err)
	for _, o := range []lease.Options{
		{FleetBatch: 10},
		{FleetInterval: time.Second},
		{Fleet: f.Member(), FleetBatch: -1},
		{Fleet: f.Member(), FleetInterval: -1},
		{Fleet: f.Member(), FleetBatch: 4, MinBatch: 5},
	} {
		_, err := lease.New(r, &o)
		assert.ErrorIs(t, err, lease.ErrInvalidOptions, "%+v", o)
	}
}

// failingFleet fails every Demand.
type failingFleet struct{ calls atomic.Int64 }

func (f *failingFleet) Demand(context.Context, string, string, float64) ([]float64, error) {
	f.calls.Add(1)
	return nil, floodgate.ErrUnavailable
}

// TestFleetFailing: a failing Fleet leaves pools sized as without one, and
// is counted.
func TestFleetFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
		f := &failingFleet{}
		l := newLease(t, r, &lease.Options{Fleet: f, MaxBatch: 1000})
		for range 300 {
			for range 10 {
				d, err := l.Allow(ctx, "k")
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s := l.Stats()
		assert.Equal(t, f.calls.Load(), s.ShareErrors)
		assert.Zero(t, s.Shares)
		assert.GreaterOrEqual(t, s.ShareErrors, int64(2), "asked again every FleetInterval")
		assert.LessOrEqual(t, s.ShareErrors, int64(4), "at most once per FleetInterval")
		assert.Zero(t, l.Share("k"))
		assert.InDelta(t, 100, l.Batch("k"), 30, "sized by local demand: 1000/s for 100ms")
		require.NoError(t, l.Close())
	})
}

// TestFleetSizesPools: 20 processes lease one key of a 10,000-a-second
// window, one busy (4,000/s) and 19 light (50/s each). With a Fleet the
// units their pools hold together stay within FleetBatch (625, the
// quota/16 one process holds by default) plus MinBatch each, the busy
// process holds most of them, and every decision is still admitted. Each
// process without a Fleet sizes by its own demand, and together they hold
// more (the test fails with Fleet unset).
func TestFleetSizesPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const procs, quota = 20, 10000
		r := newRemote(t, floodgate.FixedWindow{Limit: quota, Window: time.Second})
		fleet, err := lease.NewMemFleet(3*time.Second, nil)
		require.NoError(t, err)
		stores := make([]leased, procs)
		for i := range stores {
			stores[i] = newLease(t, r, &lease.Options{Fleet: fleet.Member()})
		}
		var denied atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(6 * time.Second)
		for i, l := range stores {
			perTick, every := 40, 10*time.Millisecond // 4,000/s
			if i > 0 {
				perTick, every = 1, 20*time.Millisecond // 50/s
			}
			wg.Go(func() {
				for time.Now().Before(end) {
					for range perTick {
						d, err := l.Allow(ctx, "k")
						if err != nil {
							t.Error(err)
							return
						}
						if !d.Allowed {
							denied.Add(1)
						}
					}
					time.Sleep(every)
				}
			})
		}
		// Sample the units held from the fourth second on: every process
		// records a measured demand at its first share after a second, and
		// computes its share from the others' at its next, after two.
		maxHeld := int64(0)
		wg.Go(func() {
			time.Sleep(3*time.Second + 5*time.Millisecond)
			for time.Now().Before(end) {
				held := int64(0)
				for _, l := range stores {
					held += l.Held("k")
				}
				maxHeld = max(maxHeld, held)
				time.Sleep(10 * time.Millisecond)
			}
		})
		wg.Wait()
		bound := int64(quota/16+1) + procs*lease.DefaultMinBatch // 625 + 20
		t.Logf("most held: %d (bound %d); shares: busy %d, light %d", maxHeld, bound, stores[0].Share("k"), stores[1].Share("k"))
		assert.LessOrEqual(t, maxHeld, bound)
		assert.Zero(t, denied.Load(), "the demand is below the quota")
		// The busy process's claim (800) does not fit; the light ones'
		// (10 each) do: it gets 625 − 19·10 = 435 or about, give or take
		// the demand's measure.
		assert.InDelta(t, 435, stores[0].Share("k"), 40)
		for _, l := range stores[1:] {
			assert.InDelta(t, 10, l.Share("k"), 5)
		}
		for _, l := range stores {
			s := l.Stats()
			assert.Zero(t, s.ShareErrors)
			// One share a second, from the first refill on.
			assert.LessOrEqual(t, s.Shares, int64(7))
			require.NoError(t, l.Close())
		}
	})
}

// TestFleetNewcomer: a process that joins a busy fleet is not held to
// MinBatch (a round trip a decision) before its demand has been measured:
// its first record carries no measure, and sets no share.
func TestFleetNewcomer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
		fleet, err := lease.NewMemFleet(3*time.Second, nil)
		require.NoError(t, err)
		opts := func() *lease.Options {
			return &lease.Options{Fleet: fleet.Member(), FleetBatch: 400, MaxBatch: 1000}
		}
		// drive makes 20 decisions every 10ms (2,000/s) until end.
		drive := func(l leased, end time.Time) {
			for time.Now().Before(end) {
				for range 20 {
					d, err := l.Allow(ctx, "k")
					if err != nil || !d.Allowed {
						t.Errorf("%v %v", d, err)
						return
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		var busy []leased
		for range 4 {
			busy = append(busy, newLease(t, r, opts()))
		}
		var wg sync.WaitGroup
		end := time.Now().Add(5 * time.Second)
		for _, l := range busy {
			wg.Go(func() { drive(l, end) })
		}
		time.Sleep(3 * time.Second) // the busy ones hold their shares: 100 each
		newcomer := newLease(t, r, opts())
		wg.Go(func() { drive(newcomer, time.Now().Add(time.Second)) })
		wg.Wait()
		s := newcomer.Stats()
		t.Logf("newcomer: %d decisions, %d leases, share %d; a busy one's share %d", s.Local+s.Waited, s.Leases, newcomer.Share("k"), busy[0].Share("k"))
		// 2,000 decisions in its first second: with batches of about 200
		// (its local demand for a TargetInterval) a few dozen leases, with
		// MinBatch 2,000.
		assert.Less(t, s.Leases, int64(100))
		for _, l := range append(busy, newcomer) {
			require.NoError(t, l.Close())
		}
	})
}
