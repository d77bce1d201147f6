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
	"github.com/floodgate-go/floodgate/observe"
)

// observedAlgs are the algorithms of callWorkload: a single algorithm and
// a Limits, whose script is another.
var (
	observedBucket = floodgate.TokenBucket{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
	observedLimits = floodgate.Limits{observedBucket, floodgate.FixedWindow{Limit: 1_000_000, Window: time.Hour}}
)

// callWorkload makes rounds rounds of script calls on s from goroutines
// goroutines at once, on keys of their own, and returns how many it made:
// each round a take, a Limits take, and an in-flight Acquire, renewal and
// Release, each one script call, and each admitted.
func callWorkload(t *testing.T, s *Store, goroutines, rounds int) int {
	t.Helper()
	ctx := context.Background()
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", g)
			for range rounds {
				for _, alg := range []floodgate.Algorithm{observedBucket, observedLimits} {
					if res, err := applyOnce(ctx, s, key, alg, take); err != nil || !res.Allowed {
						errs <- fmt.Errorf("Apply(%T) = %+v, %v", alg, res, err)
						return
					}
				}
				res, err := s.Acquire(ctx, testName, key, 1000, time.Minute)
				if err != nil || !res.Allowed {
					errs <- fmt.Errorf("Acquire = %+v, %v", res, err)
					return
				}
				if ok, err := s.Renew(ctx, testName, key, res.Hold, time.Minute); err != nil || !ok {
					errs <- fmt.Errorf("Renew = %v, %v", ok, err)
					return
				}
				if err := s.Release(ctx, testName, key, res.Hold); err != nil {
					errs <- fmt.Errorf("Release = %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return goroutines * rounds * 5
}

// loadScripts loads every script of the store on c's servers, so that no
// call meets NOSCRIPT.
func loadScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	for _, ps := range [][progInflight + 1]program{programs, batchPrograms} {
		for _, p := range ps {
			if p.src != "" {
				require.NoError(t, c.ScriptLoad(context.Background(), p.src).Err())
			}
		}
	}
}

// decisionsOf returns the sum of the Decisions of cs.
func decisionsOf(cs []observe.StoreCall) (n int) {
	for _, c := range cs {
		n += c.Decisions
	}
	return n
}

// TestObserverStoreCalls makes script calls of every kind (takes, Limits,
// in-flight acquisitions, renewals and releases) from several goroutines
// and checks OnStoreCall: unbatched, exactly one event per call, each
// carrying one decision; batched, the pipelines' Decisions add up to the
// calls. Every event names the store and the node, and its round trip
// was answered and timed. (On a Cluster, every node is a master of it.)
func TestObserverStoreCalls(t *testing.T) {
	const goroutines, rounds = 8, 10
	for _, tc := range []struct {
		name    string
		cluster bool
		batch   int
	}{
		{"unbatched", false, 1},
		{"batched", false, 16},
		{"cluster/unbatched", true, 1},
		{"cluster/batched", true, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				c     redis.UniversalClient
				nodes = map[string]bool{}
			)
			if tc.cluster {
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t), ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = cc.Close() })
				var mu sync.Mutex
				require.NoError(t, cc.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
					mu.Lock()
					defer mu.Unlock()
					nodes[m.Options().Addr] = true
					return nil
				}))
				c = cc
			} else {
				parallelOnMiniredis(t)
				srv := newServer(t)
				c = srv.client(t)
				nodes[srv.addr] = true
			}
			loadScripts(t, c) // the batch scripts too, which one caller does not use
			rec := &recorder{}
			s := newStore(t, c, &Options{Name: "calls", Observer: rec.observer(), BatchSize: tc.batch})
			callWorkload(t, s, 1, 1) // dials
			rec.takeCalls()

			n := callWorkload(t, s, goroutines, rounds)
			cs := rec.takeCalls()
			for i, c := range cs {
				require.Equal(t, "calls", c.Name, "call %d", i)
				require.True(t, nodes[c.Node], "call %d: node %q is not a master", i, c.Node)
				require.Equal(t, observe.CallOK, c.Outcome, "call %d: %+v", i, c)
				require.NoError(t, c.Err, "call %d", i)
				require.Positive(t, c.Latency, "call %d", i)
				require.Positive(t, c.Decisions, "call %d", i)
			}
			require.Equal(t, n, decisionsOf(cs), "the calls' decisions")
			if tc.batch < 2 {
				require.Len(t, cs, n, "one event per call")
			} else {
				require.LessOrEqual(t, len(cs), n, "a pipeline carries one call or more")
				t.Logf("%d calls in %d pipelines", n, len(cs))
			}
			require.Empty(t, rec.takeFailures(s))
		})
	}
}

// TestObserverNoScript flushes the server's scripts: the next call's
// EVALSHA is answered NOSCRIPT and the store sends EVAL, two round trips
// that OnStoreCall receives as two calls carrying the decision, the first
// answered (CallOK) with the NOSCRIPT error. Batched, the pipeline and
// its re-sent EVAL are two calls alike.
func TestObserverNoScript(t *testing.T) {
	srv := newServer(t)
	for _, batch := range []int{1, 16} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			c := srv.client(t)
			rec := &recorder{}
			s := newStore(t, c, &Options{Observer: rec.observer(), BatchSize: batch})
			ctx := context.Background()
			take := floodgate.Request{Op: floodgate.OpTake, N: 1}
			_, err := applyOnce(ctx, s, "k", observedBucket, take)
			require.NoError(t, err)
			require.NoError(t, c.ScriptFlush(ctx).Err())
			rec.takeCalls()

			_, err = applyOnce(ctx, s, "k", observedBucket, take)
			require.NoError(t, err)
			cs := rec.takeCalls()
			require.Len(t, cs, 2, "%+v", cs)
			require.True(t, isNoScript(cs[0].Err), "the EVALSHA: %+v", cs[0])
			require.Equal(t, observe.CallOK, cs[0].Outcome)
			require.Equal(t, observe.CallOK, cs[1].Outcome)
			require.NoError(t, cs[1].Err, "the EVAL")
			for _, c := range cs {
				require.Equal(t, 1, c.Decisions)
				require.Equal(t, srv.addr, c.Node)
			}
		})
	}
}

// TestObserverFailuresProxyDown takes Redis away (a proxy resets every
// connection and refuses new ones) under FailOpen traffic: see
// checkFailureCounts.
func TestObserverFailuresProxyDown(t *testing.T) {
	srv := newServer(t)
	px := newProxy(t, srv.addr)
	c := redis.NewClient(&redis.Options{Addr: px.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	checkFailureCounts(t, c, testPrefix(t, srv.client(t)), px.addr(), func() { px.setDown(true) })
}

// checkFailureCounts makes FailOpen decisions on a store on c from many
// goroutines, on Redis and then, after fault, without it, and counts from
// the callers' side the decisions that fell back: FailOpen's Remaining is
// the quota less the unit, which Redis never answers once each key has
// spent more. Once the goroutines are done and the store closed, the
// Counts of OnFailures add up to exactly those decisions, and each
// (node, policy) has at most one event per FailureInterval of the outage,
// and one more for Close. The old observer told of every failed decision:
// hundreds of thousands of events here, where at most 22 are allowed.
// The store's keys start with prefix; node is the address it calls.
func checkFailureCounts(t *testing.T, c redis.UniversalClient, prefix, node string, fault func()) {
	t.Helper()
	const (
		goroutines = 16
		every      = 50 * time.Millisecond
		outage     = time.Second
		quota      = 1_000_000_000
	)
	rec := &recorder{every: every}
	s := newStore(t, c, &Options{
		Prefix:    prefix,
		Name:      "counted",
		OnFailure: FailOpen,
		Observer:  rec.observer(),
		// No timeout before the fault: a loaded machine must not fail
		// decisions that Redis makes.
		Timeout: time.Second,
	})
	lim, err := floodgate.New(s, floodgate.FixedWindow{Limit: quota, Window: time.Hour}, testOpts)
	require.NoError(t, err)
	ctx := context.Background()
	for g := range goroutines {
		_, err := lim.AllowN(ctx, fmt.Sprint(g), 5)
		require.NoError(t, err)
	}
	var (
		stop              atomic.Bool
		onRedis, fellBack atomic.Int64
		wg                sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint(g)
			var fell int64
			for !stop.Load() {
				d, err := lim.Allow(ctx, key)
				switch {
				case err != nil:
					t.Errorf("Allow = %v under FailOpen", err)
					return
				case d.Remaining == quota-1:
					fell++
				default:
					onRedis.Add(1)
				}
			}
			fellBack.Add(fell)
		}()
	}
	for onRedis.Load() < 100 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	fault()
	time.Sleep(outage) // the outage whose failures are counted
	stop.Store(true)
	wg.Wait()
	require.NoError(t, s.Close())
	d := time.Since(start)

	fs := rec.takeFailures(s)
	t.Logf("%d decisions on Redis, %d fell back in %v, reported in %d events", onRedis.Load(), fellBack.Load(), d, len(fs))
	require.Positive(t, fellBack.Load())
	require.Equal(t, fellBack.Load(), counted(fs), "OnFailures' counts against the decisions that fell back")
	bound := int((d+every-1)/every) + 1
	require.LessOrEqual(t, len(fs), bound, "at most one event per %v of a %v outage, and Close's", every, d)
	for i, f := range fs {
		require.Equal(t, "counted", f.Name, "event %d", i)
		require.Equal(t, node, f.Node, "event %d", i)
		require.Equal(t, "open", f.Policy, "event %d", i)
		require.Positive(t, f.Count, "event %d", i)
		require.ErrorIs(t, f.Err, floodgate.ErrUnavailable, "event %d", i)
	}
	require.NotErrorIs(t, fs[0].Err, ErrBreakerOpen, "the first failure is Redis', which opened the breaker")
	for i := range s.single.fails {
		require.False(t, s.single.fails[i].pending(), "counts left after Close")
	}
	require.Empty(t, rec.takeFailures(s), "reports after Close")
}

// TestFailuresExact fails every decision of many goroutines (nothing
// listens at the address: the breaker opens, and the decisions after it
// fail at once) while the counts are reported every millisecond, so that
// reports race the counting all the time: the Counts add up to every
// decision, under each policy, and a report follows the previous one by
// at least the interval (Close's aside).
func TestFailuresExact(t *testing.T) {
	const goroutines, each = 8, 20_000
	addr := deadAddr(t)
	for _, policy := range []FailurePolicy{FailOpen, FailClosed, FailError} {
		t.Run(policy.String(), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1, PoolSize: 100_000})
			t.Cleanup(func() { _ = c.Close() })
			var (
				mu    sync.Mutex
				times []time.Time
				fs    []observe.Failures
			)
			const every = time.Millisecond
			s, err := New(c, &Options{Prefix: "fgtest:exact:", OnFailure: policy, Observer: &observe.Observer{
				OnFailures: func(_ context.Context, f observe.Failures) {
					mu.Lock()
					defer mu.Unlock()
					times, fs = append(times, time.Now()), append(fs, f)
				},
				FailureInterval: every,
			}})
			require.NoError(t, err)
			lim, err := floodgate.New(s, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, testOpts)
			require.NoError(t, err)
			var wg sync.WaitGroup
			begin := time.Now()
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						_, _ = lim.Allow(context.Background(), "k")
					}
				}()
			}
			wg.Wait()
			took := time.Since(begin)
			require.NoError(t, s.Close())
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, int64(goroutines*each), counted(fs), "in %d reports", len(fs))
			for i, f := range fs {
				require.Equal(t, policy.label(), f.Policy, "report %d", i)
				require.Positive(t, f.Count, "report %d", i)
				require.ErrorIs(t, f.Err, floodgate.ErrUnavailable, "report %d", i)
			}
			for i := 1; i < len(times)-1; i++ {
				require.GreaterOrEqual(t, times[i].Sub(times[i-1]), every, "reports %d and %d", i-1, i)
			}
			t.Logf("%d decisions in %v, in %d reports", goroutines*each, took, len(fs))
		})
	}
}

// TestObserverBreaker takes Redis away until the breaker opens, then
// brings it back: OnBreaker receives closed→open, and after the cooldown
// open→half-open and half-open→closed, in that order, each with the
// store's name and the node. The observer asks the store for the
// breaker's state, which would deadlock if it ran under the breaker's
// lock.
func TestObserverBreaker(t *testing.T) {
	srv := newServer(t)
	px := newProxy(t, srv.addr)
	c := redis.NewClient(&redis.Options{Addr: px.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var (
		s       *Store
		mu      sync.Mutex
		changes []observe.BreakerChange
		states  []BreakerState
	)
	s = newStore(t, c, &Options{
		Prefix:           testPrefix(t, srv.client(t)),
		Name:             "sessions",
		BreakerThreshold: 2,
		BreakerCooldown:  time.Minute,
		Observer: &observe.Observer{OnBreaker: func(_ context.Context, ch observe.BreakerChange) {
			state := s.BreakerState("k")
			mu.Lock()
			defer mu.Unlock()
			changes, states = append(changes, ch), append(states, state)
		}},
	})
	wall := &virtualWall{t: t0}
	s.wall = wall.now
	ctx := context.Background()
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	_, err := applyOnce(ctx, s, "k", observedBucket, take)
	require.NoError(t, err)

	px.setDown(true)
	for range 5 {
		_, err := applyOnce(ctx, s, "k", observedBucket, take)
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
	}
	px.setDown(false)
	wall.advance(time.Minute)
	// This decision sends the probe and fails as when the breaker is
	// open; once the probe closed it, decisions go to Redis.
	_, err = applyOnce(ctx, s, "k", observedBucket, take)
	require.ErrorIs(t, err, ErrBreakerOpen)
	require.Equal(t, BreakerClosed, waitProbe(t, s, "k"))
	_, err = applyOnce(ctx, s, "k", observedBucket, take)
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	node := px.addr()
	require.Equal(t, []observe.BreakerChange{
		{Name: "sessions", Node: node, From: BreakerClosed, To: BreakerOpen},
		{Name: "sessions", Node: node, From: BreakerOpen, To: BreakerHalfOpen},
		{Name: "sessions", Node: node, From: BreakerHalfOpen, To: BreakerClosed},
	}, changes)
	require.Equal(t, []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerClosed}, states, "the state the observer reads is the new one")
}

// replayHook answers every command with the reply of the first script
// call that succeeded, without sending it, so that AllocsPerRun counts
// this process' client and store and not miniredis' interpreter, which
// runs in the process too and whose allocations vary by one from run to
// run. The reference step accepts the replayed reply every time: it
// holds the state and the instant it was made from.
type replayHook struct{ reply any }

func (h *replayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := cmd.(interface {
			Val() any
			SetVal(any)
		})
		if !ok {
			return next(ctx, cmd)
		}
		if h.reply != nil {
			c.SetVal(h.reply)
			return nil
		}
		err := next(ctx, cmd)
		if err == nil {
			h.reply = c.Val()
		}
		return err
	}
}

func (h *replayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestObserverAllocs checks that observing a store allocates nothing: an
// unbatched decision allocates as many times with an Observer as without
// (on miniredis, replaying its reply: see replayHook), and so does a
// FailOpen decision of an open breaker, which the observer counts.
func TestObserverAllocs(t *testing.T) {
	var calls, failures atomic.Int64
	obs := &observe.Observer{
		OnStoreCall: func(context.Context, observe.StoreCall) { calls.Add(1) },
		OnFailures:  func(_ context.Context, f observe.Failures) { failures.Add(f.Count) },
		OnBreaker:   func(context.Context, observe.BreakerChange) {},
	}
	allocs := func(c redis.UniversalClient, o Options) float64 {
		o.Prefix = "fgtest:allocs:"
		s := newStore(t, c, &o)
		lim, err := floodgate.New(s, observedBucket, testOpts)
		require.NoError(t, err)
		ctx := context.Background()
		for range 20 { // scripts loaded, connections dialed, breaker open
			_, _ = lim.Allow(ctx, "k")
		}
		return testing.AllocsPerRun(500, func() { _, _ = lim.Allow(ctx, "k") })
	}
	srv := newServer(t)
	c := srv.client(t)
	t.Cleanup(func() { deleteKeys(t, c, "fgtest:allocs:") })
	if !srv.real() {
		c.AddHook(&replayHook{})
	}
	plain := allocs(c, Options{})
	observed := allocs(c, Options{Observer: obs})
	t.Logf("a decision on Redis: %v allocations, observed %v", plain, observed)
	if raceEnabled {
		// Under the race detector sync.Pool drops a quarter of what is
		// put back at random, so a pooled call context is sometimes
		// made anew: the counts differ by the luck of the draw.
		require.InDelta(t, plain, observed, 1, "allocations of an observed decision")
	} else {
		require.Equal(t, plain, observed, "allocations of an observed decision")
	}
	require.Positive(t, calls.Load())

	dead := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1, PoolSize: 100_000})
	t.Cleanup(func() { _ = dead.Close() })
	plain = allocs(dead, Options{OnFailure: FailOpen, BreakerCooldown: time.Hour})
	observed = allocs(dead, Options{OnFailure: FailOpen, BreakerCooldown: time.Hour, Observer: obs})
	t.Logf("a FailOpen decision of an open breaker: %v allocations, observed %v", plain, observed)
	require.Equal(t, plain, observed, "allocations of an observed failure")
}

// TestObserverRedirect sends a call to the wrong master of a Cluster: it
// answers MOVED, a round trip answered (CallOK, with the MOVED error),
// and the call made again through the ClusterClient is a second one, to
// the master the redirection names.
func TestObserverRedirect(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	loadScripts(t, cc)
	rec := &recorder{}
	s := newStore(t, cc, &Options{Observer: rec.observer()})
	ctx := context.Background()
	kind := kindOf(observedBucket)
	rkey := s.Key(testName, "moved", kind)
	right, err := s.nodeFor(ctx, rkey)
	require.NoError(t, err)
	var wrong *node
	for i := 0; wrong == nil; i++ {
		n, err := s.nodeFor(ctx, s.Key(testName, fmt.Sprint("other", i), kind))
		require.NoError(t, err)
		if n != right {
			wrong = n
		}
	}
	a, err := resolve(observedBucket)
	require.NoError(t, err)
	args := a.args("", time.Now(), floodgate.Request{Op: floodgate.OpTake, N: 1}, s.marginMs)
	_, err = s.runAt(ctx, wrong, prog(kind), rkey, nil, args, s.trip(ctx, wrong, 1))
	require.NoError(t, err)
	cs := rec.takeCalls()
	require.Len(t, cs, 2, "%+v", cs)
	require.Equal(t, wrong.addr, cs[0].Node)
	require.True(t, isRedirect(cs[0].Err), "%+v", cs[0])
	require.Equal(t, observe.CallOK, cs[0].Outcome)
	require.Equal(t, right.addr, cs[1].Node, "the node MOVED names")
	require.Equal(t, observe.CallOK, cs[1].Outcome)
	require.NoError(t, cs[1].Err)
}
