package redisstore

import (
	"os"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
)

// nowFunc adapts a clock function to server.clock.
type nowFunc func() time.Time

func (f nowFunc) Now() time.Time { return f() }

// runConformance runs the store conformance suite: unchanged on a real
// Redis; on miniredis, whose scripts run in an interpreter written in Go
// behind one lock, with the concurrent part scaled down to keep the race
// detector's run short.
func runConformance(t *testing.T, newStore conformance.NewStore) {
	if os.Getenv("REDIS_ADDR") != "" {
		conformance.Run(t, newStore)
		return
	}
	t.Run("Steps", func(t *testing.T) { conformance.RunSteps(t, newStore) })
	t.Run("Errors", func(t *testing.T) { conformance.RunErrors(t, newStore) })
	t.Run("Reference", func(t *testing.T) { conformance.RunReference(t, newStore) })
	t.Run("Models", func(t *testing.T) { conformance.RunModels(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { conformance.RunConcurrent(t, newStore, 8, 25) })
}

// TestConformance runs the store conformance suite on redisstore with the
// suite's clock: on the Redis at REDIS_ADDR, else on a miniredis per store
// whose clock (TIME and TTLs) follows the suite's.
func TestConformance(t *testing.T) {
	parallelOnMiniredis(t)
	runConformance(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		// A minute of margin: on a real Redis, TTLs run on the wall clock
		// while the suite's clock stands still or jumps.
		return newStore(t, srv.client(t), &Options{Now: srv.clock(nowFunc(now)), ExpiryMargin: time.Minute})
	})
}

// TestConformanceBatched runs the suite with batching on.
func TestConformanceBatched(t *testing.T) {
	parallelOnMiniredis(t)
	runConformance(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		srv := newServer(t)
		return newStore(t, srv.client(t), &Options{Now: srv.clock(nowFunc(now)), ExpiryMargin: time.Minute, BatchSize: 16})
	})
}
