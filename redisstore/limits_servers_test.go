//go:build linux

package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// commandCalls returns the calls of each command the server has counted
// (INFO commandstats), by name.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, line)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}

// TestLimitsOneCall counts, on a Redis server of the test's own (so that
// nothing else moves its counts), the script calls that Limits decisions
// cost: one EVALSHA each unbatched, and at most one per decision batched
// (INFO commandstats), whatever the op (a
// reservation whose limits take the units at a later instant, a take up
// to n, charges, give-backs, checks, denials), unbatched and batched from
// many goroutines; and that the client sends nothing else once the script
// is loaded.
func TestLimitsOneCall(t *testing.T) {
	p := startRedisProc(t)
	admin := redis.NewClient(&redis.Options{Addr: p.addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ls := floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 20},
		floodgate.FixedWindow{Limit: 1000, Window: time.Hour},
		floodgate.SlidingLog{Limit: 50, Window: time.Second},
	}
	reqs := func(at time.Time) []floodgate.Request {
		return []floodgate.Request{
			{Op: floodgate.OpTake, N: 1},
			{Op: floodgate.OpTake, N: 3, MaxDelay: time.Second},
			{Op: floodgate.OpTakeUpTo, N: 5},
			{Op: floodgate.OpSettle, N: 2, At: at},
			{Op: floodgate.OpSettle, N: -1, At: at},
			{Op: floodgate.OpTake, N: 2, Check: true},
			{Op: floodgate.OpTake, N: 20, MaxDelay: time.Hour, Check: true},
		}
	}
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: p.addr()})
			t.Cleanup(func() { _ = c.Close() })
			s := newStore(t, c, &Options{BatchSize: batch})
			// The store calls through a clone of c (go-redis' defaults
			// ignore contexts; see New), which runs none of c's hooks.
			hook := &sentHook{sent: map[string]int64{}}
			s.client.(*redis.Client).AddHook(hook)
			lim, err := floodgate.New(s, ls, testOpts)
			require.NoError(t, err)
			ctx := context.Background()
			// The first decision loads the script (NOSCRIPT, then EVAL).
			first, err := lim.Apply(ctx, "warm", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
			require.NoError(t, err)
			// Ping loads the other scripts, the batched Limits one too.
			require.NoError(t, s.Ping(ctx))
			at := first.At.Add(first.Delay)

			before := commandCalls(t, admin)
			hook.mu.Lock()
			clear(hook.sent)
			hook.mu.Unlock()
			const goroutines, rounds = 8, 10
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						for _, req := range reqs(at) {
							if _, err := lim.Apply(ctx, fmt.Sprintf("k%d", (g+r)%3), req, nil); err != nil {
								errs <- err
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			after := commandCalls(t, admin)
			decisions := int64(goroutines * rounds * len(reqs(at)))
			if calls := after["evalsha"] - before["evalsha"]; batch == 1 {
				require.Equal(t, decisions, calls, "EVALSHA calls for %d decisions", decisions)
			} else {
				// Batched: Limits decisions share calls (limits_batch.lua).
				require.True(t, calls >= decisions/int64(batch) && calls <= decisions, "%d EVALSHA calls for %d decisions in batches of %d", calls, decisions, batch)
			}
			require.Equal(t, before["eval"], after["eval"], "EVAL calls")
			hook.mu.Lock()
			defer hook.mu.Unlock()
			// (The handshake of each connection dialed meanwhile aside.)
			delete(hook.sent, "hello")
			delete(hook.sent, "client")
			require.Equal(t, map[string]int64{"evalsha": after["evalsha"] - before["evalsha"]}, hook.sent, "the commands the client sent")
		})
	}
}
