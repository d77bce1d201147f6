package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/inflight/inflighttest"
	"github.com/floodgate-go/floodgate/observe"
)

// inflightStores returns n stores on n go-redis clients built with
// default options (as n processes would build them), sharing a prefix of
// their own; newClient makes each client.
func inflightStores(t *testing.T, n int, newClient func() redis.UniversalClient, opts *Options) []*Store {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	stores := make([]*Store, n)
	for i := range stores {
		c := newClient()
		t.Cleanup(func() { _ = c.Close() })
		if o.Prefix == "" {
			o.Prefix = testPrefix(t, c)
		}
		stores[i] = newStore(t, c, &o)
	}
	return stores
}

func asInflight(ss []*Store) []inflight.Store {
	out := make([]inflight.Store, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// standalone returns a function making default clients of srv.
func (s *server) newClient() func() redis.UniversalClient {
	return func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: s.addr}) }
}

func clusterClient(addrs []string) func() redis.UniversalClient {
	return func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}) }
}

// TestInflightConformance runs the in-flight harness on the Redis at
// REDIS_ADDR, else on miniredis with one round of the 512 goroutines (one
// interpreter serves them all) and, unless FLOODGATE_LOAD is set, without
// the Renewal case's 2s: CI runs it on the real Redis.
func TestInflightConformance(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	o := &inflighttest.Options{}
	var so *Options
	if !srv.real() {
		o.Rounds = 1
		o.SkipRenewal = os.Getenv("FLOODGATE_LOAD") == ""
		if o.SkipRenewal {
			o.TTL = 200 * time.Millisecond // the Expiry case alone: no renewal to delay
		}
		// 512 goroutines queue for one interpreter, which under -race
		// serves them more slowly than a call's share of the test
		// Timeout allows.
		so = &Options{Timeout: time.Minute}
	}
	inflighttest.Run(t, func(t *testing.T, n int) []inflight.Store {
		return asInflight(inflightStores(t, n, srv.newClient(), so))
	}, o)
}

// TestInflightConformanceBatched runs the harness on batching stores,
// whose in-flight calls ride in the batches' pipelines as script calls of
// their own. On miniredis it is a load test.
func TestInflightConformanceBatched(t *testing.T) {
	loadTest(t)
	parallelOnMiniredis(t)
	srv := newServer(t)
	so := &Options{BatchSize: 16}
	if !srv.real() {
		so.Timeout = time.Minute // as TestInflightConformance's
	}
	inflighttest.Run(t, func(t *testing.T, n int) []inflight.Store {
		return asInflight(inflightStores(t, n, srv.newClient(), so))
	}, &inflighttest.Options{SkipRenewal: !srv.real()})
}

// TestInflightConformanceCluster runs it on the Cluster at
// REDIS_CLUSTER_ADDRS.
func TestInflightConformanceCluster(t *testing.T) {
	addrs := clusterAddrs(t)
	inflighttest.Run(t, func(t *testing.T, n int) []inflight.Store {
		return asInflight(inflightStores(t, n, clusterClient(addrs), nil))
	}, nil)
}

// TestInflightZCARD: 8 default clients × 64 goroutines on one key, holding
// for random times: neither the holders (counting themselves between
// Acquire and Release) nor ZCARD, sampled by a ninth client, ever exceed
// the limit. On the Redis at REDIS_ADDR and the Cluster at
// REDIS_CLUSTER_ADDRS; on miniredis as a load test.
func TestInflightZCARD(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		srv := newServer(t)
		if !srv.real() {
			loadTest(t)
		}
		inflightZCARD(t, srv.newClient())
	})
	t.Run("Cluster", func(t *testing.T) {
		inflightZCARD(t, clusterClient(clusterAddrs(t)))
	})
}

func inflightZCARD(t *testing.T, newClient func() redis.UniversalClient) {
	const (
		clients    = 8
		goroutines = 64
		rounds     = 16
		limit      = 5
	)
	stores := inflightStores(t, clients, newClient, nil)
	lims := make([]*inflight.Limiter, clients)
	for i, s := range stores {
		l, err := inflight.New(s, limit, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		lims[i] = l
	}
	sampler := newClient()
	t.Cleanup(func() { _ = sampler.Close() })
	rkey := stores[0].InflightKey(lims[0].Name(), "k")
	var (
		wg                      sync.WaitGroup
		holding, peak, admitted atomic.Int64
		samples, zpeak          atomic.Int64
		failed                  atomic.Pointer[error]
		done                    = make(chan struct{})
	)
	raise := func(p *atomic.Int64, v int64) {
		for o := p.Load(); v > o && !p.CompareAndSwap(o, v); o = p.Load() {
		}
	}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := sampler.ZCard(context.Background(), rkey).Result()
			if err != nil {
				failed.CompareAndSwap(nil, &err)
				return
			}
			samples.Add(1)
			raise(&zpeak, n)
		}
	}()
	for c := range clients {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), uint64(g)))
				for range rounds {
					slot, err := lims[c].Acquire(context.Background(), "k")
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
					if !slot.Allowed {
						time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
						continue
					}
					raise(&peak, holding.Add(1))
					admitted.Add(1)
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					holding.Add(-1)
					if err := slot.Release(context.Background()); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(done)
	<-sampled
	if p := failed.Load(); p != nil {
		t.Fatalf("a call failed: %v", *p)
	}
	t.Logf("%d admissions; at most %d holders at once by their count, %d by ZCARD in %d samples (limit %d)",
		admitted.Load(), peak.Load(), zpeak.Load(), samples.Load(), limit)
	require.LessOrEqual(t, peak.Load(), int64(limit), "holders at once")
	require.LessOrEqual(t, zpeak.Load(), int64(limit), "ZCARD")
	require.GreaterOrEqual(t, admitted.Load(), int64(limit))
	require.Positive(t, samples.Load())
	n, err := sampler.ZCard(context.Background(), rkey).Result()
	require.NoError(t, err)
	require.Zero(t, n, "holds left after every Release")
}

// The environment of the child process of TestInflightKilledHolder.
const (
	childEnv     = "FLOODGATE_INFLIGHT_CHILD"   // the Redis address(es), comma-separated for a Cluster
	childPrefix  = "FLOODGATE_INFLIGHT_PREFIX"  // the stores' prefix
	childCluster = "FLOODGATE_INFLIGHT_CLUSTER" // set for a Cluster
)

// killedTTL and killedLimit are the child's TTL and limit.
const (
	killedTTL   = time.Second
	killedLimit = 3
)

// TestInflightHolderProcess is the child process of
// TestInflightKilledHolder: it takes every slot of the key, says so on
// stdout, and holds them, renewing, until it is killed. It skips unless
// run as that child.
func TestInflightHolderProcess(t *testing.T) {
	addrs := os.Getenv(childEnv)
	if addrs == "" {
		t.Skip("the child process of TestInflightKilledHolder")
	}
	var c redis.UniversalClient
	if os.Getenv(childCluster) != "" {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addrs})
	}
	s, err := New(c, &Options{Prefix: os.Getenv(childPrefix), Timeout: time.Second})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	// Renewals every quarter TTL leave three quarters for a renewal that
	// a loaded machine delays; each is logged on stderr, which the parent
	// shows if the test fails.
	l, err := inflight.New(renewLog{s}, killedLimit, &inflight.Options{TTL: killedTTL, RenewEvery: killedTTL / 4})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for range killedLimit {
		slot, err := l.Acquire(context.Background(), "k")
		if err != nil || !slot.Allowed {
			fmt.Println("error", slot.Status, err)
			os.Exit(1)
		}
	}
	fmt.Println("held")
	time.Sleep(time.Hour) // until SIGKILL
}

// renewLog logs a store's renewals on stderr.
type renewLog struct{ *Store }

func (r renewLog) Renew(ctx context.Context, name, key string, h inflight.Hold, ttl time.Duration) (bool, error) {
	start := time.Now()
	ok, err := r.Store.Renew(ctx, name, key, h, ttl)
	fmt.Fprintf(os.Stderr, "%s renew %d: %v %v in %v\n", start.Format("15:04:05.000"), h.ID, ok, err, time.Since(start))
	return ok, err
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestInflightKilledHolder: a process holding every slot of a key keeps
// them past its TTL (it renews them), and once it is killed with SIGKILL,
// without a Release, its slots free within TTL + 1s. On the Redis at
// REDIS_ADDR and the Cluster at REDIS_CLUSTER_ADDRS; miniredis runs in
// this process, which the child cannot reach.
func TestInflightKilledHolder(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		addr := os.Getenv("REDIS_ADDR")
		if addr == "" {
			t.Skip("set REDIS_ADDR to run the killed-holder test on a real Redis")
		}
		killedHolder(t, addr, false, newServerAt(addr).newClient())
	})
	t.Run("Cluster", func(t *testing.T) {
		addrs := clusterAddrs(t)
		killedHolder(t, strings.Join(addrs, ","), true, clusterClient(addrs))
	})
}

func newServerAt(addr string) *server { return &server{addr: addr} }

func killedHolder(t *testing.T, addrs string, cluster bool, newClient func() redis.UniversalClient) {
	ctx := context.Background()
	s := inflightStores(t, 1, newClient, nil)[0]
	lim, err := inflight.New(s, killedLimit, &inflight.Options{TTL: killedTTL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })

	cmd := exec.Command(os.Args[0], "-test.run=^TestInflightHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+addrs, childPrefix+"="+s.prefix)
	if cluster {
		cmd.Env = append(cmd.Env, childCluster+"=1")
	}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the child's stderr:\n%s", stderr)
		}
	})
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		require.Equal(t, "held", l, "the child's first line")
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not take the slots within 30s")
	}

	// The child renews: its slots outlive their TTL.
	until := time.Now().Add(killedTTL + killedTTL/2)
	for time.Now().Before(until) {
		d, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, d.Allowed, "a slot of a live holder freed")
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = cmd.Wait()
	for {
		d, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		if d.Allowed {
			freed := time.Since(killed)
			t.Logf("a slot freed %v after SIGKILL (TTL %v)", freed, killedTTL)
			require.LessOrEqual(t, freed, killedTTL+time.Second)
			require.NoError(t, d.Release(ctx))
			return
		}
		if time.Since(killed) > killedTTL+time.Second {
			t.Fatalf("no slot freed %v after SIGKILL (TTL %v)", time.Since(killed), killedTTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countHook counts the commands a client sends, by name.
type countHook struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.n[cmd.Name()]++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *countHook) take() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = map[string]int{}
	return n
}

// TestInflightRoundTrips: a request costs two round trips, one script per
// Acquire and one per Release, and a request shorter than RenewEvery costs
// no renewal; a denial costs one.
func TestInflightRoundTrips(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	hook := &countHook{n: map[string]int{}}
	c.AddHook(hook)
	s := newStore(t, c, nil)
	lim, err := inflight.New(s, 1, &inflight.Options{TTL: 3 * time.Second})
	require.NoError(t, err)
	defer lim.Close()
	ctx := context.Background()
	warm, err := lim.Acquire(ctx, "warm") // loads the script
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	hook.take()
	const requests = 20
	for range requests {
		slot, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, slot.Allowed)
		d, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.NoError(t, slot.Release(ctx))
	}
	time.Sleep(50 * time.Millisecond) // no renewal comes late
	require.Equal(t, map[string]int{"evalsha": 3 * requests}, hook.take(), "commands of %d requests and %d denials", requests, requests)
}

// TestInflightKeyLayout: the holds of a key under a limiter name are a
// sorted set at Prefix{key}:name:if (the hash tag keeps every name's on
// the key's Cluster slot), scored by expiry in microseconds on the store's
// clock, with a TTL that covers the newest hold and the margin.
func TestInflightKeyLayout(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	s := newStore(t, c, &Options{Now: func() time.Time { return at }, ExpiryMargin: 2 * time.Second})
	ctx := context.Background()
	require.Equal(t, s.prefix+"{user:1}:api:if", s.InflightKey("api", "user:1"))
	res, err := s.Acquire(ctx, "api", "user:1", 2, 1500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, inflight.Result{Allowed: true, InFlight: 1, Hold: res.Hold}, res)
	require.True(t, res.Hold.Expires)
	rkey := s.InflightKey("api", "user:1")
	require.Equal(t, "zset", c.Type(ctx, rkey).Val())
	members, err := c.ZRangeWithScores(ctx, rkey, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 1)
	require.Equal(t, float64(at.UnixMicro()+1_500_000), members[0].Score, "expiry score")
	require.Equal(t, s.holder(res.Hold.ID), members[0].Member)
	pttl := c.PTTL(ctx, rkey).Val()
	require.Greater(t, pttl, 3*time.Second, "PTTL")
	require.LessOrEqual(t, pttl, 3500*time.Millisecond, "PTTL")

	// A Limiter's default name is derived from its limit.
	lim, err := inflight.New(s, 20, nil)
	require.NoError(t, err)
	defer lim.Close()
	require.Equal(t, s.prefix+"{user:1}:inflight:20:if", s.InflightKey(lim.Name(), "user:1"))
	slot, err := lim.Acquire(ctx, "user:1")
	require.NoError(t, err)
	require.True(t, slot.Allowed)
	require.Equal(t, int64(1), c.ZCard(ctx, s.InflightKey(lim.Name(), "user:1")).Val())
	require.Equal(t, int64(1), c.ZCard(ctx, rkey).Val(), "another name's holds")
	require.NoError(t, slot.Release(ctx))
	require.Zero(t, c.Exists(ctx, s.InflightKey(lim.Name(), "user:1")).Val(), "the key of no holds")

	hashed := newStore(t, c, &Options{HashKeys: true})
	sum := sha256.Sum256([]byte("user:1"))
	require.Equal(t, hashed.prefix+"{"+base64.RawURLEncoding.EncodeToString(sum[:16])+"}:api:if", hashed.InflightKey("api", "user:1"))
}

// TestInflightNames: limiters of different names on one key keep their
// holds in keys of their own, all on the key's hash tag; the limiters of
// one name on several clients (processes) share theirs; a limit changed
// under one name keeps them. On the Redis at REDIS_ADDR (miniredis
// without it) and the Cluster at REDIS_CLUSTER_ADDRS. (inflighttest's
// Names and LimiterNames cases check the same through the Store
// contract.)
func TestInflightNames(t *testing.T) {
	t.Run("Standalone", func(t *testing.T) {
		parallelOnMiniredis(t)
		inflightNames(t, newServer(t).newClient())
	})
	t.Run("Cluster", func(t *testing.T) {
		inflightNames(t, clusterClient(clusterAddrs(t)))
	})
}

func inflightNames(t *testing.T, newClient func() redis.UniversalClient) {
	ctx := context.Background()
	const clients = 3
	stores := inflightStores(t, clients, newClient, nil)
	admin := newClient()
	t.Cleanup(func() { _ = admin.Close() })
	newLim := func(s *Store, limit int64, name string) *inflight.Limiter {
		l, err := inflight.New(s, limit, &inflight.Options{Name: name})
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	acquire := func(l *inflight.Limiter, allowed bool, inFlight int64) inflight.Slot {
		t.Helper()
		slot, err := l.Acquire(ctx, "user:1")
		require.NoError(t, err)
		want := inflight.Status{Allowed: allowed, Limit: l.Limit(), InFlight: inFlight}
		if !allowed {
			want.RetryAfter = inflight.DefaultRetryAfter
		}
		require.Equal(t, want, slot.Status, "Acquire of %s on limit %d", l.Name(), l.Limit())
		return slot
	}
	zcard := func(name string) int64 {
		t.Helper()
		n, err := admin.ZCard(ctx, stores[0].InflightKey(name, "user:1")).Result()
		require.NoError(t, err)
		return n
	}

	// The search/upload case: different names, one key.
	var slots []inflight.Slot
	for i, s := range stores {
		slots = append(slots, acquire(newLim(s, clients, "uploads"), true, int64(i+1)))
	}
	uploads := newLim(stores[0], clients, "uploads")
	acquire(uploads, false, clients)
	search := newLim(stores[1], clients, "search")
	for i := range clients {
		slots = append(slots, acquire(search, true, int64(i+1)))
	}
	acquire(newLim(stores[2], clients, "search"), false, clients)
	require.Equal(t, int64(clients), zcard("uploads"))
	require.Equal(t, int64(clients), zcard("search"))

	// A limit changed under one name keeps the holds, on any client.
	acquire(newLim(stores[2], clients-1, "uploads"), false, clients)
	raised := newLim(stores[1], clients+1, "uploads")
	slots = append(slots, acquire(raised, true, clients+1))
	acquire(raised, false, clients+1)
	require.Equal(t, int64(clients+1), zcard("uploads"))

	for _, s := range slots {
		require.NoError(t, s.Release(ctx))
	}
	require.Zero(t, zcard("uploads"))
	require.Zero(t, zcard("search"))
	require.NoError(t, acquire(uploads, true, 1).Release(ctx))
}

// deadAddr returns the address of a Redis that is gone: connections are
// refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close()
	return addr
}

// TestInflightFailurePolicy: an Acquire that Redis cannot answer goes to
// the store's failure policy, as a rate decision does; Renew and Release
// return the error (the hold expires at its TTL).
func TestInflightFailurePolicy(t *testing.T) {
	ctx := context.Background()
	addr := deadAddr(t)
	newDead := func(t *testing.T, o *Options) (*Store, *recorder) {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		rec := &recorder{}
		o.Prefix, o.Timeout = "fgtest:dead:", time.Second
		o.Observer = rec.observer()
		s, err := New(c, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s, rec
	}
	const name = "test"
	t.Run("FailError", func(t *testing.T) {
		s, rec := newDead(t, &Options{})
		_, aerr := s.Acquire(ctx, name, "k", 2, time.Second)
		require.ErrorIs(t, aerr, floodgate.ErrUnavailable)
		require.ErrorIs(t, aerr, ErrRedis)
		_, err := s.Renew(ctx, name, "k", inflight.Hold{ID: 7, Expires: true}, time.Second)
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
		require.ErrorIs(t, s.Release(ctx, name, "k", inflight.Hold{ID: 7, Expires: true}), floodgate.ErrUnavailable)
		// The Acquire is a failed decision; a renewal and a release are
		// not decisions, but all three are round trips, and so are the
		// background removals of the failed Release's hold, which may
		// have begun by now.
		require.Equal(t, []observe.Failures{{Name: DefaultName, Node: addr, Policy: "error", Count: 1, Err: aerr}}, rec.takeFailures(s))
		cs := rec.takeCalls()
		require.GreaterOrEqual(t, len(cs), 3)
		for _, c := range cs {
			require.Equal(t, observe.CallError, c.Outcome)
		}
	})
	t.Run("FailOpen", func(t *testing.T) {
		s, rec := newDead(t, &Options{OnFailure: FailOpen})
		for range 3 {
			res, err := s.Acquire(ctx, name, "k", 1, time.Second)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.False(t, res.Hold.Expires, "a hold Redis does not know of needs no renewal")
			ok, err := s.Renew(ctx, name, "k", res.Hold, time.Second)
			require.True(t, ok)
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, name, "k", res.Hold))
		}
		fs := rec.takeFailures(s)
		require.Len(t, fs, 1)
		require.Equal(t, "open", fs[0].Policy)
		require.Equal(t, int64(3), fs[0].Count, "the Acquires; a hold Redis does not know of is renewed and released without a round trip")
	})
	t.Run("FailClosed", func(t *testing.T) {
		s, _ := newDead(t, &Options{OnFailure: FailClosed})
		res, err := s.Acquire(ctx, name, "k", 3, time.Second)
		require.NoError(t, err)
		require.Equal(t, inflight.Result{InFlight: 3}, res)
	})
	t.Run("FailLocal", func(t *testing.T) {
		s, _ := newDead(t, &Options{OnFailure: FailLocal, LocalShare: 0.5})
		lim, err := inflight.New(s, 5, nil) // 2 per process while Redis is down
		require.NoError(t, err)
		defer lim.Close()
		a, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		b, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		c, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, a.Allowed && b.Allowed)
		require.False(t, c.Allowed)
		require.Equal(t, int64(2), c.InFlight)
		require.NoError(t, a.Release(ctx))
		d, err := lim.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed, "a local Release frees a local slot")
		// The local holds of another name are apart, as in Redis.
		other, err := inflight.New(s, 5, &inflight.Options{Name: "other"})
		require.NoError(t, err)
		defer other.Close()
		e, err := other.Acquire(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, inflight.Status{Allowed: true, Limit: 5, InFlight: 1}, e.Status)
		require.NoError(t, e.Release(ctx))
		require.NoError(t, b.Release(ctx))
		require.NoError(t, d.Release(ctx))
	})
	t.Run("Breaker", func(t *testing.T) {
		s, _ := newDead(t, &Options{BreakerThreshold: 3})
		var err error
		for range 5 {
			_, err = s.Acquire(ctx, name, "k", 1, time.Second)
		}
		require.ErrorIs(t, err, ErrBreakerOpen, "the in-flight calls count in the node's breaker")
		require.Equal(t, BreakerOpen, s.BreakerState("k"))
	})
	t.Run("Closed", func(t *testing.T) {
		s, _ := newDead(t, &Options{})
		require.NoError(t, s.Close())
		_, err := s.Acquire(ctx, name, "k", 1, time.Second)
		require.ErrorIs(t, err, floodgate.ErrClosed)
	})
	t.Run("ForeignHold", func(t *testing.T) {
		s, _ := newDead(t, &Options{})
		err := s.Release(ctx, name, "k", inflight.Hold{ID: 1, Ref: "not a hold"})
		require.ErrorIs(t, err, inflight.ErrInvalidHold)
	})
}

// TestInflightArguments: bad keys, names, limits and TTLs are errors
// before any call to Redis.
func TestInflightArguments(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		key   string
		limit int64
		ttl   time.Duration
		want  error
	}{
		{"n", "", 1, time.Second, floodgate.ErrEmptyKey},
		{"n", strings.Repeat("k", floodgate.MaxKeyLen+1), 1, time.Second, floodgate.ErrKeyTooLong},
		{"", "k", 1, time.Second, floodgate.ErrInvalidConfig},
		{"a}b", "k", 1, time.Second, floodgate.ErrInvalidConfig},
		{"{", "k", 1, time.Second, floodgate.ErrInvalidConfig},
		{"\xff", "k", 1, time.Second, floodgate.ErrInvalidConfig},
		{strings.Repeat("n", floodgate.MaxNameLen+1), "k", 1, time.Second, floodgate.ErrInvalidConfig},
		{"n", "k", 0, time.Second, floodgate.ErrInvalidConfig},
		{"n", "k", 1 << 53, time.Second, floodgate.ErrInvalidConfig},
		{"n", "k", 1, time.Microsecond, floodgate.ErrInvalidConfig},
		{"n", "k", 1, floodgate.MaxWindow + 1, floodgate.ErrInvalidConfig},
	} {
		_, err := s.Acquire(ctx, c.name, c.key, c.limit, c.ttl)
		require.ErrorIs(t, err, c.want, "Acquire(%.8q, %.8q, %d, %v)", c.name, c.key, c.limit, c.ttl)
	}
	_, err = s.Renew(ctx, "n", "k", inflight.Hold{ID: 1}, 0)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = s.Renew(ctx, "a{", "k", inflight.Hold{ID: 1}, time.Second)
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	require.ErrorIs(t, s.Release(ctx, "n", "", inflight.Hold{ID: 1}), floodgate.ErrEmptyKey)
	require.ErrorIs(t, s.Release(ctx, "", "k", inflight.Hold{ID: 1}), floodgate.ErrInvalidConfig)
	require.NoError(t, s.Release(ctx, "n", "k", inflight.Hold{}), "the zero Hold is no hold")
}

// BenchmarkStoreAcquire measures a request's two round trips on a real
// Redis (REDIS_ADDR), through an inflight.Limiter: an Acquire and its
// Release, serially on one key, and from 64 goroutines on 10,000 keys.
// (RunParallel runs parallelism × GOMAXPROCS goroutines, so "serial" is a
// plain loop and the parallel case divides by GOMAXPROCS, as
// BenchmarkStoreApply does.)
func BenchmarkStoreAcquire(b *testing.B) {
	ctx := context.Background()
	names := make([]string, 10_000)
	for i := range names {
		names[i] = "bench:" + strconv.Itoa(i)
	}
	request := func(lim *inflight.Limiter, key string) error {
		slot, err := lim.Acquire(ctx, key)
		if err != nil || !slot.Allowed {
			return fmt.Errorf("Acquire: %v, %v", slot.Status, err)
		}
		return slot.Release(ctx)
	}
	for _, mode := range []struct {
		name        string
		parallelism int // goroutines
	}{{"serial", 1}, {"parallel64", 64}} {
		b.Run(mode.name, func(b *testing.B) {
			c := benchClient(b, mode.parallelism+8)
			s := newStore(b, c, &Options{Timeout: time.Second})
			lim, err := inflight.New(s, 1<<20, nil)
			require.NoError(b, err)
			defer lim.Close()
			b.ReportAllocs()
			if mode.parallelism == 1 {
				for b.Loop() {
					if err := request(lim, names[0]); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			var seq atomic.Uint64
			b.SetParallelism(max(mode.parallelism/runtimeProcs(), 1))
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(7919)
				for pb.Next() {
					i++
					if err := request(lim, names[i%uint64(len(names))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
