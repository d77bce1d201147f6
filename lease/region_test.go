package lease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
)

// TestPodsLeaseByDemand: the pods of each region lease from the region's
// Store, sizing their pools by the region's pods' demand (lease.Options.
// Fleet, the same allocator as the regions'). Two regions of four pods
// each, one pod of each busy, share 10,000 units per 10 s window under a
// demand of 12,000: no window admits more than the quota across both
// regions, each region's busy pod holds the largest share, and the pools
// of a region hold at most FleetBatch plus a unit per pod once the shares
// are known.
func TestPodsLeaseByDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			quota  = 10000
			window = 10 * time.Second
			pods   = 4
		)
		alg := floodgate.FixedWindow{Limit: quota, Window: window}
		regions := []region.Region{{Name: "a", Floor: 0.1}, {Name: "b", Floor: 0.1}}
		coord, err := region.NewMemCoordinator(regions)
		if err != nil {
			t.Fatal(err)
		}
		type pod struct {
			leased
			perTick int // decisions per 10 ms
		}
		all := map[string][]pod{}
		admitted := map[int64]*atomic.Int64{} // by window start
		var mu sync.Mutex
		count := func(at time.Time) {
			w := at.Truncate(window).UnixNano()
			mu.Lock()
			c := admitted[w]
			if c == nil {
				c = &atomic.Int64{}
				admitted[w] = c
			}
			mu.Unlock()
			c.Add(1)
		}
		start := time.Now().Truncate(window).Add(window)
		time.Sleep(time.Until(start))
		for _, r := range regions {
			local, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := region.New(local, coord, regions, r.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			fleet, err := lease.NewMemFleet(3*time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			for p := range pods {
				ls, err := lease.New(rs, &lease.Options{Fleet: fleet.Member()})
				if err != nil {
					t.Fatal(err)
				}
				l, err := floodgate.New(ls, alg, &floodgate.Options{Name: "api"})
				if err != nil {
					t.Fatal(err)
				}
				per := 1 // 100/s
				if p == 0 {
					per = 5 // 500/s
				}
				if r.Name == "b" {
					per = max(per/2, 1)
				}
				all[r.Name] = append(all[r.Name], pod{leased{Limiter: l, Store: ls}, per})
			}
			defer rs.Close()
		}
		end := start.Add(8 * window)
		var wg sync.WaitGroup
		var errs atomic.Int64
		for _, ps := range all {
			for _, p := range ps {
				wg.Go(func() {
					for time.Now().Before(end) {
						for range p.perTick {
							d, err := p.Allow(context.Background(), "tenant")
							if err != nil {
								errs.Add(1)
								continue
							}
							if d.Allowed {
								count(time.Now())
							}
						}
						time.Sleep(10 * time.Millisecond)
					}
				})
			}
		}
		maxHeld := map[string]int64{}
		wg.Go(func() {
			time.Sleep(3*window + 5*time.Millisecond)
			for time.Now().Before(end) {
				for name, ps := range all {
					held := int64(0)
					for _, p := range ps {
						held += p.Held("tenant")
					}
					maxHeld[name] = max(maxHeld[name], held)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		wg.Wait()
		if errs.Load() != 0 {
			t.Errorf("%d decisions failed", errs.Load())
		}
		for w := start; w.Before(end); w = w.Add(window) {
			n := int64(0)
			if c := admitted[w.UnixNano()]; c != nil {
				n = c.Load()
			}
			t.Logf("window %v: admitted %d of %d", w.Sub(start), n, quota)
			if n > quota {
				t.Errorf("window %v: admitted %d, above the quota %d", w.Sub(start), n, quota)
			}
		}
		bound := int64(quota/16+1) + pods*lease.DefaultMinBatch
		for name, ps := range all {
			shares := make([]int64, len(ps))
			for i, p := range ps {
				shares[i] = p.Share("tenant")
			}
			t.Logf("region %s: shares %v, most held %d (bound %d)", name, shares, maxHeld[name], bound)
			for i := 1; i < len(ps); i++ {
				if shares[0] <= shares[i] {
					t.Errorf("region %s: the busy pod's share %d is not above pod %d's %d", name, shares[0], i, shares[i])
				}
			}
			if maxHeld[name] > bound {
				t.Errorf("region %s: the pods held %d units together, above %d", name, maxHeld[name], bound)
			}
			for _, p := range ps {
				if err := p.Close(); err != nil {
					t.Error(err)
				}
			}
		}
	})
}
