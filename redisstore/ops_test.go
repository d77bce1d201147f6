package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// TestTTLHygiene runs mixed traffic on the server's clock and checks after
// every step that the key has a TTL, no longer than the time to restore the
// full quota (Result.ResetAfter, on the same clock) plus the margin; then
// that once that time has passed the database holds none of the keys.
func TestTTLHygiene(t *testing.T) {
	srv := newServer(t)
	ttlHygiene(t, srv.client(t))
}

// TestClusterTTLHygiene is TestTTLHygiene on a Redis Cluster.
func TestClusterTTLHygiene(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ttlHygiene(t, c)
}

func ttlHygiene(t *testing.T, c redis.UniversalClient) {
	const margin = 50 * time.Millisecond
	s := newStore(t, c, &Options{ExpiryMargin: margin})
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	short := []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 5, Per: 100 * time.Millisecond, Burst: 5},
		floodgate.LeakyBucket{Rate: 5, Per: 100 * time.Millisecond, Capacity: 5},
		floodgate.FixedWindow{Limit: 5, Window: 100 * time.Millisecond},
		floodgate.SlidingWindow{Limit: 5, Window: 100 * time.Millisecond},
		floodgate.SlidingLog{Limit: 5, Window: 100 * time.Millisecond},
	}
	var admitted []floodgate.Result
	for i := range 300 {
		alg := short[r.IntN(len(short))]
		key := fmt.Sprintf("k%d", r.IntN(3))
		req := floodgate.Request{Op: floodgate.OpTake, N: 1 + r.Int64N(3)}
		switch r.IntN(5) {
		case 0:
			req.MaxDelay = time.Duration(r.Int64N(int64(100 * time.Millisecond)))
		case 1:
			req.Op = floodgate.OpTakeUpTo
		case 2:
			if len(admitted) > 0 {
				a := admitted[r.IntN(len(admitted))]
				req = floodgate.Request{Op: floodgate.OpSettle, N: -req.N, At: a.At.Add(a.Delay)}
			}
		}
		start := time.Now()
		res, err := applyOnce(ctx, s, key, alg, req)
		require.NoError(t, err)
		if res.Allowed && req.Op != floodgate.OpSettle {
			admitted = append(admitted, res)
		}
		rkey := s.Key(testName, key, kindOf(alg))
		pttl, err := c.PTTL(ctx, rkey).Result()
		require.NoError(t, err)
		if pttl == -2*time.Nanosecond {
			// The key is gone: either nothing is left to restore, or this
			// (slow, shared) machine took longer than the TTL since the
			// script ran.
			if res.ResetAfter > 0 {
				require.GreaterOrEqual(t, time.Since(start), res.ResetAfter+margin-time.Millisecond,
					"step %d: %s is missing but the quota is restored in %v", i, rkey, res.ResetAfter)
			}
			continue
		}
		// -1 is a key without a TTL; 0 one that expires this millisecond.
		require.GreaterOrEqual(t, pttl, time.Duration(0), "step %d: %s has no TTL", i, rkey)
		// The script rounds up to a millisecond, and the server's readings
		// of its clock for TIME and for TTLs differ by a few milliseconds
		// on a loaded machine (miniredis emulates wall-clock TTLs with
		// ticks).
		const slack = 10 * time.Millisecond
		bound := res.ResetAfter.Truncate(time.Millisecond) + slack + margin
		require.LessOrEqualf(t, pttl, bound, "step %d: TTL of %s is %v, restored in %v + margin %v", i, rkey, pttl, res.ResetAfter, margin)
	}
	// Everything is restored within 100 ms + the longest delay (100 ms)
	// + a window of the sliding counter; poll, with a bound, until the
	// keys are gone.
	prefix := s.prefix
	require.Eventually(t, func() bool { return len(scanKeys(t, c, prefix)) == 0 },
		5*time.Second, 20*time.Millisecond, "keys left behind: %v", scanKeys(t, c, prefix))
}

// countingHook counts the scripts run with EVALSHA and with EVAL, and the
// NOSCRIPT replies, on a client.
type countingHook struct {
	evalsha, eval, noscript atomic.Int64
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) count(cmd redis.Cmder, err error) {
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		h.evalsha.Add(1)
		if isNoScript(err) {
			h.noscript.Add(1)
		}
	case "eval":
		h.eval.Add(1)
	}
}

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd, err)
		return err
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd, cmd.Err())
		}
		return err
	}
}

// flushDuring runs traffic on stores while SCRIPT FLUSH runs on every node
// over and over, and checks that no decision failed and that the EVAL
// fallback did run.
func flushDuring(t *testing.T, flush func() error, hook *countingHook, stores []*Store, keys []string) {
	t.Helper()
	done := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if flush() == nil {
				flushes.Add(1)
			}
			time.Sleep(time.Millisecond) // pace the flushes; not a synchronization
		}
	}()
	alg := floodgate.SlidingLog{Limit: 1 << 20, Window: time.Hour}
	hammer(t, stores, keys, alg, 16, 100)
	close(done)
	wg.Wait()
	require.Positive(t, flushes.Load())
	require.Positive(t, hook.noscript.Load(), "no decision met NOSCRIPT")
	require.Positive(t, hook.eval.Load(), "no decision fell back to EVAL")
	t.Logf("%d flushes, %d EVALSHA, %d NOSCRIPT, %d EVAL", flushes.Load(), hook.evalsha.Load(), hook.noscript.Load(), hook.eval.Load())
}

// TestScriptFlush flushes the script cache during traffic: decisions meet
// NOSCRIPT and fall back to EVAL, and none fails, batched or not.
func TestScriptFlush(t *testing.T) {
	parallelOnMiniredis(t)
	loadTest(t)
	srv := newServer(t)
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			hook := &countingHook{}
			c := srv.client(t)
			c.AddHook(hook)
			s := newStore(t, c, &Options{BatchSize: batch})
			admin := srv.client(t)
			flushDuring(t, func() error { return admin.ScriptFlush(context.Background()).Err() }, hook, []*Store{s}, []string{"a", "b", "c"})
		})
	}
}

// TestClusterScriptFlush flushes the scripts of every master during
// traffic: a script is loaded per node, and each node's NOSCRIPT falls back
// to EVAL on that node.
func TestClusterScriptFlush(t *testing.T) {
	addrs := clusterAddrs(t)
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			hook := &countingHook{}
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			// On the node clients: batched pipelines go to each master's
			// client, and every other call passes through them too.
			c.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
			s := newStore(t, c, &Options{BatchSize: batch, HashKeys: true})
			keys := make([]string, 100)
			for i := range keys {
				keys[i] = fmt.Sprintf("tenant-%d", i)
			}
			flush := func() error {
				return c.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
					return n.ScriptFlush(ctx).Err()
				})
			}
			flushDuring(t, flush, hook, []*Store{s}, keys)
		})
	}
}

// TestClockSkew shows what the server's clock buys. Two gateways whose
// clocks differ by 10 s share a token bucket of 10: on their own clocks
// (Options.Now) the one ahead finds the bucket already refilled and admits
// the quota again; on the server's clock they share one exact quota, and
// every decision carries the server's instant.
func TestClockSkew(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	ctx := context.Background()
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 10}
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	admitted := func(stores ...*Store) int64 {
		var n int64
		for _, s := range stores {
			for range 20 {
				res, err := applyOnce(ctx, s, "k", alg, take)
				require.NoError(t, err)
				n += res.Granted
			}
		}
		return n
	}

	t.Run("client clocks", func(t *testing.T) {
		base := time.Now()
		if !srv.real() {
			srv.mini.SetTime(base)
		}
		prefix := testPrefix(t, c)
		behind := newStore(t, c, &Options{Prefix: prefix, Now: func() time.Time { return base }})
		ahead := newStore(t, c, &Options{Prefix: prefix, Now: func() time.Time { return base.Add(10 * time.Second) }})
		require.Equal(t, int64(20), admitted(behind, ahead), "skewed clocks admit the quota twice")
	})
	t.Run("server clock", func(t *testing.T) {
		prefix := testPrefix(t, c)
		a := newStore(t, c, &Options{Prefix: prefix})
		b := newStore(t, c, &Options{Prefix: prefix})
		before, err := c.Time(ctx).Result()
		require.NoError(t, err)
		require.Equal(t, int64(10), admitted(a, b), "one quota")
		res, err := applyOnce(ctx, b, "k", alg, take)
		require.NoError(t, err)
		after, err := c.Time(ctx).Result()
		require.NoError(t, err)
		require.False(t, res.At.Before(before.Truncate(time.Microsecond)) || res.At.After(after), "At %v is not the server's time (between %v and %v)", res.At, before, after)
	})
}

// TestBatchedCallersGivingUp runs batched decisions whose callers give up
// at random points (before their batch is sent, while it is in flight,
// after the reply) and checks that every reply reaches its own caller: the
// batcher reuses a caller's pending only once the caller has taken its
// reply. Each goroutine's key starts at its own count, so a reply meant
// for another key would show a Remaining out of the goroutine's range.
func TestBatchedCallersGivingUp(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv.client(t), &Options{BatchSize: 8, BatchPipelines: 2})
	const limit, span, goroutines, calls = int64(1) << 40, int64(1_000_000), 16, 300
	lim, err := floodgate.New(s, floodgate.FixedWindow{Limit: limit, Window: time.Hour}, testOpts)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var given, answered atomic.Int64
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "giving-up:" + strconv.Itoa(g)
			base := int64(g+1) * span // the units this goroutine's key starts with
			_, err := lim.AllowN(context.Background(), key, base)
			if !assert.NoError(t, err) {
				return
			}
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range calls {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(3) == 0 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				}
				d, err := lim.Allow(ctx, key)
				cancel()
				if err != nil {
					assert.ErrorIs(t, err, context.DeadlineExceeded)
					given.Add(1)
					continue
				}
				answered.Add(1)
				used := limit - d.Remaining
				assert.True(t, d.Allowed)
				assert.True(t, used > base && used <= base+calls, "goroutine %d got a Remaining of %d: %d used, want (%d, %d]", g, d.Remaining, used, base, base+calls)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d answered, %d given up", answered.Load(), given.Load())
	require.Positive(t, answered.Load())
}
