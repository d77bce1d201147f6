package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
)

// A lease Store over a remote store (here in memory; in production, a
// redisstore shared by every process), and a limiter on it: the first
// decision leases a batch of 10 units in one round trip, the next ones are
// served locally, and Close gives back the units not used.
func Example() {
	remote, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	ls, err := lease.New(remote, &lease.Options{MinBatch: 10, MaxBatch: 10})
	if err != nil {
		panic(err)
	}
	alg := floodgate.FixedWindow{Limit: 100, Window: 24 * time.Hour}
	lim, err := floodgate.New(ls, alg, &floodgate.Options{Name: "api"})
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
	s := ls.Stats()
	fmt.Printf("%d local, %d waited, %d lease\n", s.Local, s.Waited, s.Leases)

	if err := ls.Close(); err != nil {
		panic(err)
	}
	// The remote counts the 5 units used, no more: a limiter of the same
	// name and algorithm directly on it sees 95 left.
	direct, err := floodgate.New(remote, alg, &floodgate.Options{Name: "api"})
	if err != nil {
		panic(err)
	}
	res, err := direct.Apply(ctx, "user-42", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 100}, nil)
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

// The processes of a fleet that lease one global limit share their demand
// for it, so that each holds its fair share of FleetBatch rather than up to
// MaxBatch each. In production each process has its own redisstore on one
// Redis and passes redis.LeaseFleet(3*time.Second) as the Fleet; here two
// Stores in one process share a MemFleet.
func ExampleOptions_fleet() {
	remote, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	fleet, err := lease.NewMemFleet(3*time.Second, nil)
	if err != nil {
		panic(err)
	}
	alg := floodgate.FixedWindow{Limit: 100_000, Window: time.Minute}
	var limiters []*floodgate.Limiter
	for range 2 { // two processes
		ls, err := lease.New(remote, &lease.Options{Fleet: fleet.Member(), FleetBatch: 1000})
		if err != nil {
			panic(err)
		}
		defer ls.Close()
		lim, err := floodgate.New(ls, alg, &floodgate.Options{Name: "partner-api"})
		if err != nil {
			panic(err)
		}
		limiters = append(limiters, lim)
	}
	d, err := limiters[0].Allow(context.Background(), "global")
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Allowed)
	// Output: true
}
