package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// TestUndoLate stalls a redis-server of the test's own (DEBUG SLEEP 0.3)
// under 16 goroutines of takes, with a 50ms Timeout: the takes in flight
// time out, and Redis makes them when the stall ends. With
// floodgate.Request.UndoLate the store reads their replies and gives
// their units back, so that Redis counts exactly the units its callers
// were told were admitted; without it, it counts more (the units of the
// takes that failed), as it always did. Batched (the default) and for a
// single algorithm and a Limits.
func TestUndoLate(t *testing.T) {
	p := startRedisProc(t)
	for _, alg := range []floodgate.Algorithm{
		floodgate.FixedWindow{Limit: 1_000_000, Window: time.Hour},
		floodgate.TokenBucket{Rate: 1000, Per: time.Hour, Burst: 1_000_000},
		floodgate.Limits{floodgate.FixedWindow{Limit: 1_000_000, Window: time.Hour}, floodgate.SlidingWindow{Limit: 2_000_000, Window: time.Hour}},
	} {
		for _, undo := range []bool{true, false} {
			t.Run(fmt.Sprintf("%T/undo=%v", alg, undo), func(t *testing.T) {
				runUndoLate(t, p, alg, undo, FailError)
			})
		}
	}
	// FailOpen admits the decisions Redis failed to make: those it made
	// late count them, and UndoLate is ignored.
	t.Run("FailOpen", func(t *testing.T) {
		runUndoLate(t, p, floodgate.FixedWindow{Limit: 1_000_000, Window: time.Hour}, true, FailOpen)
	})
}

// runUndoLate is one case of TestUndoLate: alg's takes asking UndoLate
// or not, on p under policy, through a DEBUG SLEEP.
func runUndoLate(t *testing.T, p *redisProc, alg floodgate.Algorithm, undo bool, policy FailurePolicy) {
	// A default-options client, as users build them.
	c := redis.NewClient(&redis.Options{Addr: p.addr()})
	t.Cleanup(func() { _ = c.Close() })
	// A clock that stands still: no unit refills meanwhile, so
	// Redis' count is exactly the units taken.
	at := time.Now()
	s := newStore(t, c, &Options{Timeout: 50 * time.Millisecond, Now: func() time.Time { return at }, OnFailure: policy})
	b, err := s.Bind(testName, alg)
	require.NoError(t, err)
	ctx := context.Background()
	key := fmt.Sprintf("k-%v", undo)
	take := floodgate.Request{Op: floodgate.OpTake, N: 1, UndoLate: undo}
	var admitted, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := b.Apply(ctx, key, take, nil)
				switch {
				case err != nil:
					failed.Add(1)
				case res.Allowed:
					admitted.Add(1)
				default:
					t.Errorf("denied with a quota of a million: %+v", res)
					return
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	// DEBUG SLEEP stops Redis' event loop: the calls sent
	// meanwhile run when it ends, after their callers gave
	// up. (CLIENT PAUSE would not do: Redis drops the
	// commands of a paused client that closes its
	// connection, which a call that times out does.)
	actx, cancel := adminCtx()
	require.NoError(t, p.admin.Do(actx, "DEBUG", "SLEEP", "0.3").Err())
	cancel()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	// The units Redis counts, from a check of one unit: its
	// Remaining is what would be left after it, of the
	// binding limit's (the first: the million).
	counted := func() int64 {
		res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil)
		require.NoError(t, err)
		return 1_000_000 - res.Remaining - 1
	}
	if policy == FailOpen {
		// The failed decisions were admitted: Redis counts
		// those it made late, and no more.
		time.Sleep(time.Second)
		require.Zero(t, s.UndoneTakes())
		require.LessOrEqual(t, counted(), admitted.Load())
		require.Zero(t, failed.Load())
	} else if undo {
		// The give-backs come once the late replies are read.
		require.Eventually(t, func() bool { return counted() == admitted.Load() }, 10*time.Second, 20*time.Millisecond,
			"Redis counts %d units, callers were admitted %d (%d failed, %d undone)", counted(), admitted.Load(), failed.Load(), s.UndoneTakes())
		require.Positive(t, s.UndoneTakes(), "no take was late: the pause did not test anything")
	} else {
		// Let the late takes land, then count them.
		time.Sleep(time.Second)
		require.Greater(t, counted(), admitted.Load(), "no take was made after its caller gave up")
		require.Zero(t, s.UndoneTakes())
	}
	t.Logf("admitted %d, failed %d, undone %d, Redis counts %d", admitted.Load(), failed.Load(), s.UndoneTakes(), counted())
}
