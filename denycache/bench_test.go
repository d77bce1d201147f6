package denycache_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/denycache"
)

// BenchmarkCachedDenial is the cost of a denial answered from the cache:
// a spent key asked again and again (a memstore below, never reached).
func BenchmarkCachedDenial(b *testing.B) {
	s, err := denycache.New(newMem(b, nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	lim, err := floodgate.New(s, floodgate.FixedWindow{Limit: 1, Window: time.Hour}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		_, _ = lim.Allow(ctx, "spent")
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := lim.Allow(ctx, "spent"); err != nil || d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}
