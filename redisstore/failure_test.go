package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
)

func TestMain(m *testing.M) {
	// Every goroutine a Store, a proxy or a client of a test starts must
	// have ended when the tests do.
	goleak.VerifyTestMain(m)
}

func TestBreakerStateMachine(t *testing.T) {
	b := breaker{threshold: 3, cooldown: time.Second}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	call := func(now time.Time, o outcome) (bool, change) {
		t.Helper()
		ok, probe, c1 := b.allow(now)
		if !ok {
			return false, c1
		}
		c2 := b.done(now, probe, o)
		if c1.none() {
			return true, c2
		}
		return true, c1
	}

	// Timeouts count as failures.
	for range 2 {
		call(at(0), timedOut)
	}
	require.Equal(t, 2, b.cur.failures)
	b.cur = tally{}

	// Failures among many successes, a burst of them included, do not
	// open it.
	for range 10 {
		call(at(0), succeeded)
	}
	for range 9 {
		_, c := call(at(0), failed)
		require.True(t, c.none())
	}
	require.Equal(t, BreakerClosed, b.current())
	_, c := call(at(0), failed)
	require.Equal(t, change{BreakerClosed, BreakerOpen}, c, "10 failures of 20 calls open it")

	ok, _ := call(at(time.Second-1), succeeded)
	require.False(t, ok, "open until the cooldown ends")

	// After the cooldown one probe goes through; the others do not.
	ok, probe, c := b.allow(at(time.Second))
	require.True(t, ok)
	require.True(t, probe)
	require.Equal(t, change{BreakerOpen, BreakerHalfOpen}, c)
	ok, _, _ = b.allow(at(time.Second))
	require.False(t, ok, "one probe at a time")
	require.Equal(t, change{BreakerHalfOpen, BreakerOpen}, b.done(at(time.Second), true, failed), "a failed probe reopens")
	ok, _, _ = b.allow(at(2*time.Second - 1))
	require.False(t, ok)

	ok, probe, _ = b.allow(at(2 * time.Second))
	require.True(t, ok && probe)
	require.True(t, b.done(at(2*time.Second), true, ignored).none(), "a probe whose caller gave up proves nothing")
	ok, probe, _ = b.allow(at(2 * time.Second))
	require.True(t, ok && probe, "the next call probes")
	require.Equal(t, change{BreakerHalfOpen, BreakerClosed}, b.done(at(2*time.Second), true, succeeded))

	// Old calls roll out: 2 failures now, after 5 successes a second ago,
	// are below the threshold; the 3rd opens it (3 of 3 recent calls).
	for range 5 {
		call(at(2*time.Second), succeeded)
	}
	call(at(3*time.Second+time.Millisecond), failed)
	_, c = call(at(3*time.Second+time.Millisecond), failed)
	require.True(t, c.none())
	_, c = call(at(3*time.Second+time.Millisecond), failed)
	require.Equal(t, change{BreakerClosed, BreakerOpen}, c)
	// A call let through while closed that fails after the breaker opened
	// does not count again; nor does a caller who gave up.
	require.True(t, b.done(at(3*time.Second), false, failed).none())
	require.True(t, b.done(at(3*time.Second), false, ignored).none())
}

// recorder is an Observer keeping every Event.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

// virtualWall is a breaker clock a test moves by hand.
type virtualWall struct {
	mu sync.Mutex
	t  time.Time
}

func (w *virtualWall) now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.t
}

func (w *virtualWall) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t = w.t.Add(d)
}

// TestFailurePolicies takes Redis away in the middle of traffic (a proxy
// resets every connection) and checks what each policy decides, that the
// breaker trips after BreakerThreshold failures and stops calling Redis,
// and that it probes Redis back after the cooldown, after which decisions
// come from Redis again, on the state Redis kept.
func TestFailurePolicies(t *testing.T) {
	const (
		limit     = 100
		share     = 0.25
		threshold = 3
		cooldown  = time.Minute
	)
	alg := floodgate.FixedWindow{Limit: limit, Window: time.Hour}
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	for _, policy := range []FailurePolicy{FailError, FailOpen, FailClosed, FailLocal} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := newServer(t)
			px := newProxy(t, srv.addr)
			c := redis.NewClient(&redis.Options{Addr: px.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			clock := conformance.NewClock(t0)
			rec := &recorder{}
			s := newStore(t, c, &Options{
				Prefix:           testPrefix(t, srv.client(t)),
				Now:              srv.clock(clock),
				OnFailure:        policy,
				LocalShare:       share,
				BreakerThreshold: threshold,
				BreakerCooldown:  cooldown,
				Observer:         rec,
				Timeout:          time.Second,
			})
			wall := &virtualWall{t: t0}
			s.wall = wall.now
			ctx := context.Background()

			for i := range 10 {
				res, err := s.Apply(ctx, "k", alg, take)
				require.NoError(t, err)
				require.True(t, res.Allowed)
				require.Equal(t, int64(limit-1-i), res.Remaining)
			}
			require.Empty(t, rec.take())
			wall.advance(2 * time.Second) // the successes roll out of the breaker's window

			px.setDown(true)
			admitted := 0
			const calls = 40
			for i := range calls {
				res, err := s.Apply(ctx, "k", alg, take)
				require.Equal(t, i >= threshold-1, s.BreakerState() == BreakerOpen, "call %d: %v", i, err)
				if policy == FailError {
					require.ErrorIs(t, err, floodgate.ErrUnavailable)
					if i < threshold {
						require.True(t, errors.Is(err, ErrRedis) || errors.Is(err, ErrTimeout), "call %d: %v", i, err)
					} else {
						require.ErrorIs(t, err, ErrBreakerOpen, "call %d", i)
					}
					continue
				}
				require.NoError(t, err)
				if res.Allowed {
					admitted++
				} else {
					require.Positive(t, res.RetryAfter)
				}
				if policy == FailClosed {
					require.Equal(t, cooldown, res.RetryAfter)
				}
			}
			switch policy {
			case FailOpen:
				require.Equal(t, calls, admitted, "FailOpen admits everything")
			case FailClosed:
				require.Zero(t, admitted, "FailClosed admits nothing")
			case FailLocal:
				require.Equal(t, int(limit*share), admitted, "FailLocal admits the local share of the quota")
			}
			events := rec.take()
			require.Len(t, events, calls+1)
			wantKind := EventFallback
			if policy == FailError {
				wantKind = EventError
			}
			// The trip is reported by the call that trips the breaker,
			// before that call's own failure.
			for i, e := range events {
				switch {
				case i == threshold-1:
					require.Equal(t, Event{Kind: EventBreaker, From: BreakerClosed, To: BreakerOpen}, e, "the trip is reported")
				default:
					require.Equal(t, wantKind, e.Kind, "event %d", i)
					require.Equal(t, "k", e.Key)
					require.ErrorIs(t, e.Err, floodgate.ErrUnavailable)
					require.Equal(t, i > threshold, errors.Is(e.Err, ErrBreakerOpen), "event %d: %v", i, e.Err)
					if policy != FailError {
						require.Equal(t, policy, e.Policy)
					}
				}
			}

			// Still down after the cooldown: the probe fails and the
			// breaker opens again.
			wall.advance(cooldown)
			_, _ = s.Apply(ctx, "k", alg, take)
			require.Equal(t, BreakerOpen, s.BreakerState())
			events = rec.take()
			require.Equal(t, Event{Kind: EventBreaker, From: BreakerOpen, To: BreakerHalfOpen}, events[0])
			require.Equal(t, Event{Kind: EventBreaker, From: BreakerHalfOpen, To: BreakerOpen}, events[1])

			// Redis is back: after the cooldown the probe succeeds, and the
			// decision comes from Redis, which still holds the 10 units
			// admitted before the outage.
			px.setDown(false)
			wall.advance(cooldown)
			res, err := s.Apply(ctx, "k", alg, take)
			require.NoError(t, err)
			require.Equal(t, BreakerClosed, s.BreakerState())
			require.True(t, res.Allowed)
			require.Equal(t, int64(limit-11), res.Remaining)
			require.Equal(t, []Event{
				{Kind: EventBreaker, From: BreakerOpen, To: BreakerHalfOpen},
				{Kind: EventBreaker, From: BreakerHalfOpen, To: BreakerClosed},
			}, rec.take())
		})
	}
}

// TestFailLocalScales checks the local configurations FailLocal uses.
func TestFailLocalScales(t *testing.T) {
	for _, tc := range []struct {
		alg  floodgate.Algorithm
		want floodgate.Algorithm
	}{
		{floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 100}, floodgate.TokenBucket{Rate: 10, Per: 4 * time.Second, Burst: 25}},
		{floodgate.LeakyBucket{Rate: 3, Per: time.Second, Capacity: 2}, floodgate.LeakyBucket{Rate: 3, Per: 4 * time.Second, Capacity: 1}},
		{floodgate.FixedWindow{Limit: 10, Window: time.Minute}, floodgate.FixedWindow{Limit: 2, Window: time.Minute}},
		{floodgate.SlidingWindow{Limit: 1, Window: time.Minute}, floodgate.SlidingWindow{Limit: 1, Window: time.Minute}},
		{floodgate.SlidingLog{Limit: 7, Window: time.Second}, floodgate.SlidingLog{Limit: 1, Window: time.Second}},
	} {
		a, err := resolve(tc.alg)
		require.NoError(t, err)
		got := a.scale(0.25)
		assert.Equal(t, tc.want, got)
		assert.NoError(t, got.Validate())
		assert.Equal(t, tc.alg, a.scale(1))
	}
}

// TestTimeout stalls Redis (connections stay open, nothing answers) and
// checks that decisions fail with ErrTimeout after Options.Timeout rather
// than waiting for go-redis' own timeouts, whether or not the client
// honours context deadlines, and that a caller's own deadline is not
// counted against Redis.
func TestTimeout(t *testing.T) {
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 10}
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	for _, honours := range []bool{true, false} {
		t.Run(map[bool]string{true: "ContextTimeoutEnabled", false: "ContextTimeoutDisabled"}[honours], func(t *testing.T) {
			srv := newServer(t)
			// go-redis' own bounds, which Options.Timeout must beat.
			px, c := proxiedClient(t, srv, honours, 2*time.Second)
			rec := &recorder{}
			// One slot: only the first call is a cold one, with a longer
			// timeout.
			s := newStore(t, c, &Options{Prefix: testPrefix(t, srv.client(t)), Timeout: 50 * time.Millisecond, Observer: rec, BreakerThreshold: 100, MaxInFlight: 1})
			require.Equal(t, !honours, s.guard)
			ctx := context.Background()
			_, err := s.Apply(ctx, "k", alg, take)
			require.NoError(t, err)

			px.setStalled(true)
			defer px.setStalled(false)
			_, err = s.Apply(ctx, "k", alg, take)
			require.ErrorIs(t, err, ErrTimeout)
			require.ErrorIs(t, err, floodgate.ErrUnavailable)

			// The caller's own deadline, shorter than Timeout, is the
			// caller's: its error is returned as is, and the breaker does
			// not count it.
			short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			defer cancel()
			_, err = s.Apply(short, "k", alg, take)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, floodgate.ErrUnavailable)
			require.Len(t, rec.take(), 1, "only the store's timeout is reported")
			require.Equal(t, 1, s.breaker.cur.failures+s.breaker.prev.failures)
		})
	}
}

// proxiedClient returns a proxy to srv and a client of it that does not
// retry, with go-redis' read and write timeouts set to rw.
func proxiedClient(t *testing.T, srv *server, honours bool, rw time.Duration) (*proxy, *redis.Client) {
	t.Helper()
	px := newProxy(t, srv.addr)
	c := redis.NewClient(&redis.Options{
		Addr: px.addr(), ContextTimeoutEnabled: honours, MaxRetries: -1,
		ReadTimeout: rw, WriteTimeout: rw,
	})
	t.Cleanup(func() { _ = c.Close() })
	return px, c
}

// TestNoTimeout checks that with Options.Timeout NoTimeout a stalled call
// waits for the caller's context (or go-redis' own timeouts), unbatched
// and batched: the store adds no deadline of its own, and the caller's
// deadline is the caller's, not counted against Redis.
func TestNoTimeout(t *testing.T) {
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 10}
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	for _, batch := range []int{0, 4} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			srv := newServer(t)
			px, c := proxiedClient(t, srv, true, 10*time.Second)
			rec := &recorder{}
			s := newStore(t, c, &Options{Prefix: testPrefix(t, srv.client(t)), Timeout: NoTimeout, Observer: rec, BatchSize: batch})
			ctx := context.Background()
			_, err := s.Apply(ctx, "k", alg, take)
			require.NoError(t, err)

			px.setStalled(true)
			// Released after 300ms, far beyond DefaultTimeout: the call
			// waits it out and succeeds.
			go func() {
				time.Sleep(300 * time.Millisecond)
				px.setStalled(false)
			}()
			res, err := s.Apply(ctx, "k", alg, take)
			require.NoError(t, err)
			require.True(t, res.Allowed)

			px.setStalled(true)
			defer px.setStalled(false)
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err = s.Apply(short, "k", alg, take)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, floodgate.ErrUnavailable)
			require.Empty(t, rec.take(), "the caller's deadline is not Redis failing")
		})
	}
}

// switchDialer dials through a switch a test can turn off: off, every
// connection it made is closed and new ones are refused, as when the
// servers are unreachable.
type switchDialer struct {
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

func (d *switchDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		return nil, errors.New("test: unreachable")
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err == nil {
		d.conns[c] = struct{}{}
	}
	return c, err
}

func (d *switchDialer) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
	if down {
		for c := range d.conns {
			_ = c.Close()
		}
		clear(d.conns)
	}
}

// TestClusterFailLocal makes a Redis Cluster unreachable in the middle of
// traffic: decisions go to the local share, the breaker trips, and once
// the cluster is back its probe succeeds and decisions resume on the state
// the cluster kept.
func TestClusterFailLocal(t *testing.T) {
	addrs := clusterAddrs(t)
	d := &switchDialer{conns: map[net.Conn]struct{}{}}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Dialer: d.dial, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = direct.Close() })
	clock := conformance.NewClock(t0)
	rec := &recorder{}
	s := newStore(t, c, &Options{
		Prefix:           testPrefix(t, direct),
		Now:              clock.Now,
		OnFailure:        FailLocal,
		LocalShare:       0.5,
		BreakerThreshold: 3,
		BreakerCooldown:  time.Minute,
		Observer:         rec,
		Timeout:          time.Second,
	})
	wall := &virtualWall{t: t0}
	s.wall = wall.now
	ctx := context.Background()
	alg := floodgate.FixedWindow{Limit: 20, Window: time.Hour}
	granted := func(keys []string) (n int64) {
		for _, k := range keys {
			res, err := s.Apply(ctx, k, alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
			require.NoError(t, err)
			n += res.Granted
		}
		return n
	}
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i%3) // 3 keys, 10 decisions each
	}
	require.Equal(t, int64(30), granted(keys))
	wall.advance(2 * time.Second)

	d.setDown(true)
	require.Equal(t, int64(30), granted(keys), "each key's local share, 10, is available")
	require.Equal(t, int64(0), granted(keys), "and spent")
	require.Equal(t, BreakerOpen, s.BreakerState())
	for _, e := range rec.take() {
		if e.Kind == EventFallback {
			require.Equal(t, FailLocal, e.Policy)
		}
	}

	d.setDown(false)
	wall.advance(time.Minute)
	res, err := s.Apply(ctx, "k0", alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
	require.NoError(t, err)
	require.Equal(t, BreakerClosed, s.BreakerState())
	require.Equal(t, int64(20-11), res.Remaining, "the cluster kept the 10 units admitted before the outage")
}
