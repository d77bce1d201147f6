package fgprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// TestComponents gives the adapter's Observer to the real components
// (on memstore) and checks the metrics they produce: in-flight, adaptive,
// shed and lease.
func TestComponents(t *testing.T) {
	m := newMetrics(t, nil)
	obs := m.Observer()
	ctx := context.Background()
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("inflight", func(t *testing.T) {
		lim, err := inflight.New(inflight.NewLocalStore(), 2, &inflight.Options{Name: "uploads", Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		var slots []inflight.Slot
		for range 3 {
			s, err := lim.Acquire(ctx, "user-1")
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, s)
		}
		if err := slots[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		_ = slots[0].Release(ctx) // a second release reports nothing
		want := `
# HELP floodgate_inflight_acquires_total Acquisitions of an inflight.Limiter, by outcome (allowed, denied, error).
# TYPE floodgate_inflight_acquires_total counter
floodgate_inflight_acquires_total{limiter="uploads",outcome="allowed"} 2
floodgate_inflight_acquires_total{limiter="uploads",outcome="denied"} 1
floodgate_inflight_acquires_total{limiter="uploads",outcome="error"} 0
# HELP floodgate_inflight_requests Slots of an inflight.Limiter this process holds: its admitted acquisitions minus its releases.
# TYPE floodgate_inflight_requests gauge
floodgate_inflight_requests{limiter="uploads"} 1
`
		if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_inflight_acquires_total", "floodgate_inflight_requests"); err != nil {
			t.Error(err)
		}
		if h := histogram(t, m, "floodgate_inflight_hold_seconds"); h.GetSampleCount() != 1 {
			t.Errorf("inflight_hold_seconds count = %d, want 1", h.GetSampleCount())
		}
	})

	t.Run("adaptive", func(t *testing.T) {
		limit, err := adaptive.NewFixed(1)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := adaptive.NewLimiter(limit, &adaptive.LimiterOptions{Name: "workers", Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := lim.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Acquire(ctx); !errors.Is(err, adaptive.ErrLimitExceeded) {
			t.Fatalf("second Acquire of a limit of 1: %v, want ErrLimitExceeded", err)
		}
		tok.Success()
		want := `
# HELP floodgate_adaptive_rejections_total Requests an adaptive.Limiter rejected, by the partition they asked for (empty for none) and reason (limit, queue, timeout, canceled).
# TYPE floodgate_adaptive_rejections_total counter
floodgate_adaptive_rejections_total{limiter="workers",partition="",reason="limit"} 1
`
		if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_adaptive_rejections_total"); err != nil {
			t.Error(err)
		}
	})

	t.Run("shed", func(t *testing.T) {
		s, err := shed.New(shed.GaugeFunc(func() float64 { return 0.9 }), &shed.Options{Name: "api", Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		for _, class := range []string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable, adaptive.ClassSheddable} {
			s.Allow(class)
		}
		want := `
# HELP floodgate_shed_total Requests a shed.Shedder shed, by criticality class.
# TYPE floodgate_shed_total counter
floodgate_shed_total{class="sheddable",shedder="api"} 2
`
		if err := testutil.CollectAndCompare(m, strings.NewReader(want), "floodgate_shed_total"); err != nil {
			t.Error(err)
		}
	})

	t.Run("lease", func(t *testing.T) {
		// The store under the lease is observed: its steps are the
		// lease's refills and returns, under the limiter's name.
		remote, err := observe.Store(store, obs)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := lease.New(remote, &lease.Options{Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.New(ls, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 1000}, &floodgate.Options{Name: "leased"})
		if err != nil {
			t.Fatal(err)
		}
		for range 50 {
			if d, err := lim.Allow(ctx, "user-1"); err != nil || !d.Allowed {
				t.Fatalf("Allow: %+v, %v", d, err)
			}
		}
		if err := ls.Close(); err != nil { // gives the unused units back
			t.Fatal(err)
		}
		value := func(name string, labels map[string]string) float64 {
			t.Helper()
			return counterValue(t, m, name, labels)
		}
		trips := value("floodgate_lease_round_trips_total", map[string]string{"limiter": "leased", "outcome": "granted"})
		leased := value("floodgate_lease_units_total", map[string]string{"limiter": "leased", "kind": "leased"})
		returned := value("floodgate_lease_units_total", map[string]string{"limiter": "leased", "kind": "returned"})
		refills := value("floodgate_decisions_total", map[string]string{"limiter": "leased", "op": "take_up_to"})
		refunds := value("floodgate_decisions_total", map[string]string{"limiter": "leased", "op": "refund"})
		t.Logf("%v round trips leased %v units, %v returned; the remote saw %v refills and %v refunds", trips, leased, returned, refills, refunds)
		if trips < 1 || trips != refills {
			t.Errorf("%v lease round trips granted, the remote saw %v refills: want as many, at least 1", trips, refills)
		}
		// 50 units used: the rest went back, as the remote was told.
		if leased-returned != 50 {
			t.Errorf("leased %v, returned %v: want 50 used", leased, returned)
		}
		if returned > 0 && refunds < 1 {
			t.Errorf("%v units returned, but the remote saw no refund", returned)
		}
		if value("floodgate_lease_returns_total", map[string]string{"limiter": "leased", "reason": "closed"}) < 1 && returned > 0 {
			t.Error("units returned at Close, but no return with reason closed")
		}
	})
}
