package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
)

// A lease Limiter in front of a remote limiter (here in memory; in
// production, a floodgate.New limiter on a redisstore): the first decision
// leases a batch of 10 units in one round trip, the next ones are served
// locally, and Close gives back the units not used.
func Example() {
	store, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	alg := floodgate.FixedWindow{Limit: 100, Window: 24 * time.Hour}
	remote, err := floodgate.New(store, alg)
	if err != nil {
		panic(err)
	}
	lim, err := lease.New(remote, &lease.Options{MinBatch: 10, MaxBatch: 10})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 5 {
		d, err := lim.Allow(ctx, "user-42")
		if err != nil {
			panic(err)
		}
		// Remaining: the units left in the pool plus the remote's 90.
		fmt.Println(d.Allowed, d.Remaining)
	}
	s := lim.Stats()
	fmt.Printf("%d local, %d waited, %d lease\n", s.Local, s.Waited, s.Leases)

	if err := lim.Close(); err != nil {
		panic(err)
	}
	// The remote counts the 5 units used, no more.
	res, err := remote.Apply(ctx, "user-42", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 100})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Granted, "left")
	// Output:
	// true 99
	// true 98
	// true 97
	// true 96
	// true 95
	// 4 local, 1 waited, 1 lease
	// 95 left
}
