package redisstore

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
)

// nowFunc adapts a clock function to server.clock.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

// TestConformance runs the store conformance suite on redisstore with the
// suite's clock: on the Redis at REDIS_ADDR, else on a miniredis per store
// whose clock (TIME and TTLs) follows the suite's.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		// A minute of margin: on a real Redis, TTLs run on the wall clock
		// while the suite's clock stands still or jumps.
		return newStore(t, srv.client(t), &Options{Now: srv.clock(nowFunc(now)), ExpiryMargin: time.Minute})
	})
}

// TestConformanceBatched runs the suite with batching on.
func TestConformanceBatched(t *testing.T) {
	conformance.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		return newStore(t, srv.client(t), &Options{Now: srv.clock(nowFunc(now)), ExpiryMargin: time.Minute, BatchSize: 16})
	})
}
