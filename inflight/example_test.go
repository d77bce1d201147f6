package inflight_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/memstore"
)

func Example() {
	store, _ := memstore.New(nil)
	lim, err := inflight.New(store, 2, nil) // 2 requests in flight per key
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	ctx := context.Background()

	a, _ := lim.Acquire(ctx, "user:42")
	b, _ := lim.Acquire(ctx, "user:42")
	c, _ := lim.Acquire(ctx, "user:42")
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, c.InFlight, c.RetryAfter)

	_ = a.Release(ctx)
	_ = a.Release(ctx) // idempotent
	d, _ := lim.Acquire(ctx, "user:42")
	fmt.Println(d.Allowed, d.InFlight)
	_ = b.Release(ctx)
	_ = d.Release(ctx)
	// Output:
	// true true false 2 1s
	// true 2
}
