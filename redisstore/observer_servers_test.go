//go:build linux

package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// pipelineHook counts the pipelines of script calls a client sends (not
// those that set up a connection: HELLO, CLIENT SETINFO).
type pipelineHook struct{ sent, single atomic.Int64 }

func (h *pipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if name := strings.ToLower(cmds[0].Name()); name == "evalsha" || name == "eval" {
			h.sent.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestObserverCallsCommandstats counts, on a Redis server of the test's
// own (so that nothing else moves its counts), the script calls the
// server ran (INFO commandstats) against the round trips OnStoreCall
// received for callWorkload's calls. Unbatched, with the scripts flushed
// first: one event per EVALSHA and one per EVAL, the NOSCRIPT answers
// among them, and the decisions of the events are the calls plus those
// sent twice. Batched, with the scripts loaded: one event per pipeline the
// client sent and per call sent alone (the direct path, taken when no
// pipeline is in flight), carrying the calls between them, each pipeline
// at least one EVALSHA.
func TestObserverCallsCommandstats(t *testing.T) {
	p := startRedisProc(t)
	admin := redis.NewClient(&redis.Options{Addr: p.addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			hook := &pipelineHook{}
			c.AddHook(hook) // the store calls through c, which honours contexts
			rec := &recorder{}
			s := newStore(t, c, &Options{Observer: rec.observer(), BatchSize: batch})
			if batch < 2 {
				require.NoError(t, admin.ScriptFlush(ctx).Err())
			} else {
				loadScripts(t, admin)
			}
			rec.takeCalls()
			before := commandCalls(t, admin)
			pipelines, single := hook.sent.Load(), hook.single.Load()

			n := callWorkload(t, s, 8, 10)
			after := commandCalls(t, admin)
			cs := rec.takeCalls()
			evalsha, eval := after["evalsha"]-before["evalsha"], after["eval"]-before["eval"]
			noscript := 0
			for _, c := range cs {
				require.Equal(t, p.addr(), c.Node)
				if isNoScript(c.Err) {
					noscript++
				}
			}
			t.Logf("%d calls: %d events, %d EVALSHA, %d EVAL, %d NOSCRIPT, %d pipelines", n, len(cs), evalsha, eval, noscript, hook.sent.Load()-pipelines)
			if batch < 2 {
				require.Positive(t, eval, "the flushed scripts are sent again")
				require.Equal(t, evalsha+eval, int64(len(cs)), "an event per EVALSHA and per EVAL")
				require.Equal(t, eval, int64(noscript), "an EVAL per NOSCRIPT")
				require.Equal(t, n+noscript, decisionsOf(cs), "the decisions of the events: each call, and again each EVAL")
				return
			}
			require.Zero(t, eval)
			require.Equal(t, n, decisionsOf(cs), "the decisions of the pipelines")
			require.Equal(t, hook.sent.Load()-pipelines+hook.single.Load()-single, int64(len(cs)), "an event per pipeline and per call sent alone")
			require.LessOrEqual(t, int64(len(cs)), evalsha)
			require.LessOrEqual(t, evalsha, int64(n))
		})
	}
}

// TestObserverFailuresRedisKilled kills (SIGKILL) the redis-server the
// test started under FailOpen traffic: see checkFailureCounts.
func TestObserverFailuresRedisKilled(t *testing.T) {
	p := startRedisProc(t)
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	// The server is the test's own, and dies with the keys.
	checkFailureCounts(t, c, "fgtest:killed:", p.addr(), p.kill)
}
