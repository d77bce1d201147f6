package redisstore

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// TestPing: a store reaching its server answers Ping with nil and has its
// scripts loaded; one that cannot reach it (a refused connection, a
// server that stopped answering) says so within Ping's context, with an
// error matching ErrUnavailable and ErrRedis, whatever the client's own
// timeouts; after Close, Ping fails with ErrClosed.
func TestPing(t *testing.T) {
	parallelOnMiniredis(t)
	ctx := context.Background()
	t.Run("Reachable", func(t *testing.T) {
		srv := newServer(t)
		c := srv.client(t)
		s := newStore(t, c, nil)
		require.NoError(t, s.Ping(ctx))
		for _, p := range programs {
			if p.src == "" {
				continue
			}
			ok, err := c.ScriptExists(ctx, p.hash).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true}, ok, "a script Ping loaded")
		}
		require.NoError(t, s.Close())
		require.ErrorIs(t, s.Ping(ctx), floodgate.ErrClosed)
	})
	t.Run("Refused", func(t *testing.T) {
		// No retries: go-redis' backoff between them is the test's time.
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		s, err := New(c, nil)
		require.NoError(t, err, "New makes no call to Redis")
		t.Cleanup(func() { _ = s.Close() })
		err = s.Ping(ctx)
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
		require.ErrorIs(t, err, ErrRedis)
	})
	for _, honours := range []bool{true, false} {
		t.Run(map[bool]string{true: "StalledContextTimeoutEnabled", false: "StalledDefaultOptions"}[honours], func(t *testing.T) {
			srv := newServer(t)
			// go-redis' own read timeout is a minute: Ping must not wait
			// for it.
			px, c := proxiedClient(t, srv, honours, time.Minute)
			s := newStore(t, c, nil)
			px.setStalled(true)
			t.Cleanup(func() { px.setStalled(false) })
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			var err error
			withTimeout(t, 30*time.Second, "Ping of a stalled server", func() { err = s.Ping(short) })
			require.ErrorIs(t, err, floodgate.ErrUnavailable)
			require.ErrorIs(t, err, ErrRedis)
			require.ErrorIs(t, err, ErrTimeout)
		})
	}
	t.Run("Cluster", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t)})
		t.Cleanup(func() { _ = c.Close() })
		s := newStore(t, c, nil)
		require.NoError(t, s.Ping(ctx))
		var masters atomic.Int64 // ForEachMaster calls fn on goroutines
		require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			masters.Add(1)
			ok, err := n.ScriptExists(ctx, programs[progLimits].hash).Result()
			if err == nil && !ok[0] {
				t.Errorf("master %s lacks the Limits script after Ping", n.Options().Addr)
			}
			return err
		}))
		require.Positive(t, masters.Load())
	})
}

// withTimeout runs f and fails t if it has not returned within d.
func withTimeout(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s has not returned after %v", what, d)
	}
}

// sentHook counts the commands a client sends, by name, with a SCRIPT
// command's subcommand ("evalsha", "script load").
type sentHook struct {
	mu   sync.Mutex
	sent map[string]int64
}

func (h *sentHook) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		name := strings.ToLower(c.Name())
		if args := c.Args(); name == "script" && len(args) > 1 {
			name += " " + strings.ToLower(fmt.Sprint(args[1]))
		}
		h.sent[name]++
	}
}

func (h *sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// TestPingLoadsWhatIsMissing: Ping loads the scripts a server lacks and
// only those (SCRIPT EXISTS first): every script on a fresh server, none
// once they are there, and the flushed ones after a SCRIPT FLUSH; the
// decisions that follow meet no NOSCRIPT (no EVAL is sent). Before, Ping
// sent every script (432 KB of Lua) on every call.
func TestPingLoadsWhatIsMissing(t *testing.T) {
	addr := newMini(t)
	var hashes []string
	for _, ps := range [][]program{programs[:], batchPrograms[:]} {
		for _, p := range ps {
			if p.src != "" {
				hashes = append(hashes, p.hash)
			}
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	for i, step := range []struct {
		before    func()
		wantLoads int64
	}{
		{func() {}, int64(len(hashes))},
		{func() {}, 0},
		{func() { require.NoError(t, admin.ScriptFlush(ctx).Err()) }, int64(len(hashes))},
	} {
		step.before()
		// A client that honours contexts is the store's own (see derive),
		// so the hook sees its calls.
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		hook := &sentHook{sent: map[string]int64{}}
		c.AddHook(hook)
		s := newStore(t, c, nil)
		require.NoError(t, s.Ping(ctx))
		have, err := admin.ScriptExists(ctx, hashes...).Result()
		require.NoError(t, err)
		require.NotContains(t, have, false, "a script Ping did not load")
		lim, err := floodgate.New(s, floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 1000}, testOpts)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				_, err := lim.Allow(ctx, "k")
				require.NoError(t, err)
			})
		}
		wg.Wait()
		hook.mu.Lock()
		sent := maps.Clone(hook.sent)
		hook.mu.Unlock()
		t.Logf("store %d sent %v", i, sent)
		require.Equal(t, int64(1), sent["script exists"])
		require.Equal(t, step.wantLoads, sent["script load"])
		require.Zero(t, sent["eval"], "a decision met NOSCRIPT")
		require.Positive(t, sent["evalsha"])
	}
}
