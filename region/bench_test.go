package region_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
)

// BenchmarkStoreTake measures a decision through a region's Store on
// memstore against memstore alone: the wrapper's cost (the quota's entry,
// the limit of the window, the demand count, the check of the window the
// local store decided in).
func BenchmarkStoreTake(b *testing.B) {
	alg := floodgate.FixedWindow{Limit: 1 << 40, Window: time.Minute}
	for _, tc := range []struct {
		name string
		wrap bool
	}{{"memstore", false}, {"region", true}} {
		local, _ := memstore.New(nil)
		var store floodgate.Store = local
		if tc.wrap {
			regions := []region.Region{{Name: "a", Floor: 1}}
			coord, _ := region.NewMemCoordinator(regions)
			s, err := region.New(local, coord, regions, "a", &region.Options{Manual: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			store = s
		}
		l, err := floodgate.New(store, alg, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(tc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Allow(ctx, "k")
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = l.Allow(ctx, "k")
				}
			})
		})
	}
}
