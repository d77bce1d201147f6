package inflight_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/inflight"
)

func Example() {
	store := inflight.NewLocalStore()
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

// Two limiters on one store, keyed by the same user, count apart: a key's
// holds belong to it under the limiter's name. Without Options.Name the
// name is derived from the limit.
func ExampleOptions_name() {
	store := inflight.NewLocalStore()
	exports, _ := inflight.New(store, 1, &inflight.Options{Name: "exports"})
	defer exports.Close()
	imports, _ := inflight.New(store, 1, &inflight.Options{Name: "imports"})
	defer imports.Close()
	search, _ := inflight.New(store, 20, nil)
	defer search.Close()
	ctx := context.Background()

	e, _ := exports.Acquire(ctx, "user:42")
	i, _ := imports.Acquire(ctx, "user:42")
	again, _ := exports.Acquire(ctx, "user:42")
	fmt.Println(e.Allowed, i.Allowed, again.Allowed)
	fmt.Println(search.Name())
	_ = e.Release(ctx)
	_ = i.Release(ctx)
	// Output:
	// true true false
	// inflight:20
}
