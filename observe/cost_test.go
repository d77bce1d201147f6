package observe

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// BenchmarkCost measures the parts of an observed decision that shaped
// the design, each alone (docs/observability.md, "What observing a
// decision costs"):
//
//   - count/one, count/striped: the Tally's addition from parallel
//     goroutines, on counters of one stripe and of the stripes a Tally
//     makes for this machine;
//   - draw: the random number that would pick the decisions to time;
//   - event/stack, event/registers: calling an observer with a
//     DecisionEvent (144 bytes, passed on the stack) and with a value of
//     five words (passed in registers), after a decision of nothing.
func BenchmarkCost(b *testing.B) {
	for _, tc := range []struct {
		name    string
		stripes int
	}{{"one", 0}, {"striped", stripesFor(runtime.GOMAXPROCS(0))}} {
		b.Run("count/"+tc.name, func(b *testing.B) {
			c := newCounters("bench", 0, tc.stripes)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.stripe().count(ActionTake, Allowed, 1)
				}
			})
		})
	}
	b.Run("draw", func(b *testing.B) {
		var timed int
		for b.Loop() {
			if rand.Uint32() < 1<<26 {
				timed++
			}
		}
		_ = timed
	})
	ctx := context.Background()
	b.Run("event/stack", func(b *testing.B) {
		on := observerOf(func(context.Context, DecisionEvent) {})
		for b.Loop() {
			d, err := decideNothing()
			on(ctx, DecisionEvent{Name: "bench", Key: "key", N: 1, Outcome: outcome(&d, err), Decision: d, Err: err})
		}
	})
	b.Run("event/registers", func(b *testing.B) {
		on := observerOf(func(context.Context, smallEvent) {})
		for b.Loop() {
			d, err := decideNothing()
			on(ctx, smallEvent{Name: "bench", N: 1, Outcome: outcome(&d, err)})
		}
	})
}

// smallEvent is an event of five words, which Go passes in registers.
type smallEvent struct {
	Name    string
	N       int64
	Outcome Outcome
	Latency time.Duration
}

// observerOf hides f from the compiler, as an Observer's field is.
//
//go:noinline
func observerOf[E any](f func(context.Context, E)) func(context.Context, E) { return f }

//go:noinline
func decideNothing() (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
}
