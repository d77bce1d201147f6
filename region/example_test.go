package region_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
)

// Two regions share 1,000 units a minute. Each decides on its own store;
// reconciling moves units to where the demand is.
func Example() {
	regions := []region.Region{{Name: "eu", Floor: 0.05}, {Name: "us", Floor: 0.05}}
	coord, _ := region.NewMemCoordinator(regions) // rediscoord.New on a Redis, in production
	now := time.Unix(1_800_000_000, 0)            // a virtual clock: the start of a minute
	clock := func() time.Time { return now }

	limiters := map[string]*floodgate.Limiter{}
	stores := map[string]*region.Store{}
	for _, r := range regions {
		local, _ := memstore.New(&memstore.Options{Now: clock}) // redisstore.New on the region's Redis
		s, _ := region.New(local, coord, regions, r.Name, &region.Options{Now: clock, Manual: true})
		defer s.Close()
		stores[r.Name] = s
		limiters[r.Name], _ = floodgate.New(s, floodgate.FixedWindow{Limit: 1000, Window: time.Minute},
			&floodgate.Options{Name: "api"})
	}
	ctx := context.Background()
	for second := range 3 {
		admitted := map[string]int{}
		for name, demand := range map[string]int{"eu": 30, "us": 10} {
			for range demand {
				if d, _ := limiters[name].Allow(ctx, "tenant-1"); d.Allowed {
					admitted[name]++
				}
			}
		}
		now = now.Add(time.Second)
		for _, r := range regions {
			_ = stores[r.Name].Reconcile(ctx)
		}
		holds := func(name string) int64 {
			a := stores[name].Allocation("api", floodgate.FixedWindow{Limit: 1000, Window: time.Minute}, "tenant-1")
			return a.Granted - a.Debited
		}
		fmt.Printf("second %d: admitted eu %d, us %d; then eu holds %d, us %d\n",
			second, admitted["eu"], admitted["us"], holds("eu"), holds("us"))
	}
	// eu reconciles first and takes what us, not heard from yet, leaves;
	// once both have reported, max-min fairness over the window gives each
	// 500 (eu wants 1,800, us 600).

	// Output:
	// second 0: admitted eu 30, us 10; then eu holds 950, us 50
	// second 1: admitted eu 30, us 10; then eu holds 500, us 500
	// second 2: admitted eu 30, us 10; then eu holds 500, us 500
}
