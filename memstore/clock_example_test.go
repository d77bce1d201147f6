package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// newCachedClock returns a clock that reads the time a goroutine stores
// every tick, and a function stopping the goroutine. A decision then reads
// one word instead of the system clock, and its instants lag the true time
// by up to tick: a token bucket refills up to tick late (it admits less,
// never more, than with the exact clock), and a window opens up to tick
// late.
func newCachedClock(tick time.Duration) (now func() time.Time, stop func()) {
	var ns atomic.Int64
	base := time.Now()
	ns.Store(base.UnixNano())
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// Monotonic elapsed time, as the default clock: a wall
				// clock step does not move it.
				ns.Store(base.UnixNano() + int64(time.Since(base)))
			}
		}
	}()
	return func() time.Time { return time.Unix(0, ns.Load()) },
		func() { close(done); <-stopped }
}

// A coarser clock through Options.Now: the store reads a time cached by a
// goroutine every millisecond instead of the system clock. See the package
// doc, "# Clock", for what it saves.
func ExampleOptions_cachedClock() {
	now, stop := newCachedClock(time.Millisecond)
	defer stop()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(s, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, nil)
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(context.Background(), "user:1")
	fmt.Println(d.Allowed, d.Remaining, err)
	// Output: true 9 <nil>
}
