package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"

	"github.com/floodgate-go/floodgate"
)

// leakTTL is the TTL of the holds of the tests of failed in-flight calls:
// long enough that no hold expires while they wait, so that only the
// store's own removals can bring the count down.
const leakTTL = 30 * time.Second

// leakWait bounds a test's wait for the count of holds to settle: well
// within leakTTL, and far past the removals' attempts after a test's 1s
// stall (due at the node's first answer, else 1.4s after the failure).
const leakWait = 25 * time.Second

// stall is a fault that makes Redis answer nothing from begin to end.
type stall struct {
	name       string
	begin, end func(t *testing.T)
}

// debugSleep is DEBUG SLEEP of d on the server p: begin returns once the
// server has stopped answering, end once it answers again.
func debugSleep(p *redisProc, d time.Duration) stall {
	done := make(chan error, 1)
	return stall{
		name: "DEBUG SLEEP",
		begin: func(t *testing.T) {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
				defer cancel()
				done <- p.admin.Do(ctx, "DEBUG", "SLEEP", d.Seconds()).Err()
			}()
			probe := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			defer func() { _ = probe.Close() }()
			deadline := time.Now().Add(d / 2)
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				err := probe.Ping(ctx).Err()
				cancel()
				if err != nil {
					return // asleep
				}
			}
			t.Fatalf("DEBUG SLEEP %v: the server still answers after %v", d, d/2)
		},
		end: func(t *testing.T) { require.NoError(t, <-done) },
	}
}

// proxyStall holds the traffic of px: what a client wrote during the stall
// reaches Redis when it ends, as after a stalled server or network.
func proxyStall(px *proxy) stall {
	return stall{
		name:  "proxy stall",
		begin: func(*testing.T) { px.setStalled(true) },
		end:   func(*testing.T) { px.setStalled(false) },
	}
}

// leakSetup returns a limiter of limit on a store over c with a short
// Timeout, warmed up (its connections dialled, its script loaded, its cold
// calls spent), and the client to count its holds with.
func leakSetup(t *testing.T, c *redis.Client, limit int64) (*Store, *inflight.Limiter) {
	t.Helper()
	s := newStore(t, c, &Options{Timeout: 200 * time.Millisecond})
	lim, err := inflight.New(s, limit, &inflight.Options{TTL: leakTTL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 2 * s.maxInFlight {
		wg.Go(func() {
			slot, err := lim.Acquire(ctx, "warm")
			if err == nil {
				_ = slot.Release(ctx)
			}
		})
	}
	wg.Wait()
	return s, lim
}

// acquireOutsideStall takes a slot of key before or after a stall, when
// Redis answers: a call that a loaded machine delays past the store's
// short Timeout is tried again (its hold, if Redis added one, is the
// store's to remove in the background, as the tests expect of every
// failed Acquire), so that only the stall decides which calls fail.
func acquireOutsideStall(t *testing.T, lim *inflight.Limiter, key string) inflight.Slot {
	t.Helper()
	var err error
	for range 20 {
		var slot inflight.Slot
		if slot, err = lim.Acquire(context.Background(), key); err == nil {
			require.True(t, slot.Allowed, "Acquire(%q) = %+v", key, slot.Status)
			return slot
		}
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
	}
	t.Fatalf("Acquire(%q) failed 20 times without a stall, the last with %v", key, err)
	return inflight.Slot{}
}

// releaseOutsideStall releases slot after a stall. A Release that a loaded
// machine delays past the store's Timeout fails, and the store releases
// it again in the background: the caller's waitHolds sees it done.
func releaseOutsideStall(t *testing.T, slot inflight.Slot) {
	t.Helper()
	if err := slot.Release(context.Background()); err != nil {
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
		t.Logf("a Release after the stall failed (%v); the store retries it", err)
	}
}

// waitHolds waits, within leakWait, until the key holds want holds.
func waitHolds(t *testing.T, rdb *redis.Client, rkey string, want int64, what string) {
	t.Helper()
	var n int64
	ok := func() bool {
		var err error
		n, err = rdb.ZCard(context.Background(), rkey).Result()
		return err == nil && n == want
	}
	deadline := time.Now().Add(leakWait)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: ZCARD %s = %d after %v, want %d (the holds live %v)", what, rkey, n, leakWait, want, leakTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkFailedAcquires: Acquires that fail during the stall (timed out,
// their scripts run by Redis after the stall) leave no hold behind once
// the store has removed them, well before their TTL: the key holds
// exactly the slots callers hold.
func checkFailedAcquires(t *testing.T, rdb, c *redis.Client, f stall) {
	s, lim := leakSetup(t, c, 1000)
	ctx := context.Background()
	const key, held, callers = "k", 5, 64
	var slots []inflight.Slot
	for range held {
		slots = append(slots, acquireOutsideStall(t, lim, key))
	}
	f.begin(t)
	var (
		mu     sync.Mutex
		failed int
		wg     sync.WaitGroup
	)
	for range callers {
		wg.Go(func() {
			slot, err := lim.Acquire(ctx, key)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
			} else if slot.Allowed {
				slots = append(slots, slot)
			}
		})
	}
	wg.Wait()
	f.end(t)
	require.Positive(t, failed, "Acquires failed during the %s", f.name)
	rkey := s.InflightKey(lim.Name(), key)
	waitHolds(t, rdb, rkey, int64(len(slots)), f.name+": after failed Acquires")
	for _, slot := range slots {
		releaseOutsideStall(t, slot)
	}
	waitHolds(t, rdb, rkey, 0, f.name+": after the Releases")
	t.Logf("%s: %d of %d Acquires failed; %d holds abandoned", f.name, failed, callers, s.AbandonedHolds())
}

// checkFailedReleases: Releases that fail during the stall (timed out, or
// never sent for want of a slot) are tried again by the store, which
// frees every slot well before its TTL.
func checkFailedReleases(t *testing.T, rdb, c *redis.Client, f stall) {
	s, lim := leakSetup(t, c, 1000)
	ctx := context.Background()
	const key, held = "k", 50
	slots := make([]inflight.Slot, held)
	for i := range slots {
		slots[i] = acquireOutsideStall(t, lim, key)
	}
	f.begin(t)
	var (
		mu     sync.Mutex
		failed int
		wg     sync.WaitGroup
	)
	for _, slot := range slots {
		wg.Go(func() {
			if err := slot.Release(ctx); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	f.end(t)
	require.Positive(t, failed, "Releases failed during the %s", f.name)
	waitHolds(t, rdb, s.InflightKey(lim.Name(), key), 0, f.name+": after failed Releases")
	t.Logf("%s: %d of %d Releases failed; %d holds abandoned", f.name, failed, held, s.AbandonedHolds())
}

// TestInflightFailedAcquireLeavesNoHold stalls a Redis of the test's own
// (DEBUG SLEEP 1s, longer than the store's 200ms Timeout) while 64
// goroutines Acquire: the Acquires fail, Redis runs the scripts already
// written once it wakes, and the store removes their holds in the
// background. Without the removal those holds kept their slots for the
// whole TTL.
func TestInflightFailedAcquireLeavesNoHold(t *testing.T) {
	p := startRedisProc(t)
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	checkFailedAcquires(t, p.admin, c, debugSleep(p, time.Second))
}

// TestInflightFailedReleaseRetried: as TestInflightFailedAcquireLeavesNoHold,
// for 50 Releases during the stall; the store releases again the holds
// whose Releases failed.
func TestInflightFailedReleaseRetried(t *testing.T) {
	p := startRedisProc(t)
	c := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	checkFailedReleases(t, p.admin, c, debugSleep(p, time.Second))
}

// TestInflightFailedCallsProxy: both, on any server (miniredis without
// REDIS_ADDR) behind a proxy that holds the traffic until every call of
// the stall has failed: what the store wrote meanwhile reaches Redis after
// it.
func TestInflightFailedCallsProxy(t *testing.T) {
	parallelOnMiniredis(t)
	for _, tc := range []struct {
		name  string
		check func(t *testing.T, rdb, c *redis.Client, f stall)
	}{{"Acquire", checkFailedAcquires}, {"Release", checkFailedReleases}} {
		t.Run(tc.name, func(t *testing.T) {
			parallelOnMiniredis(t)
			srv := newServer(t)
			rdb := srv.client(t)
			px := newProxy(t, srv.addr)
			c := redis.NewClient(&redis.Options{Addr: px.addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			f := proxyStall(px)
			tc.check(t, rdb, c, f)
		})
	}
}

// TestCleanupBounds: the queue of removals holds at most cleanupQueue,
// drops and counts the next, and Close drops and counts what is queued
// and stops the workers (goleak checks them at the end of the package).
func TestCleanupBounds(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	s := newStore(t, srv.client(t), nil)
	due := time.Now().Add(time.Hour) // never due within the test
	for i := range cleanupQueue + 1 {
		s.addCleanup(cleanup{rkey: "k", member: strconv.Itoa(i), due: due, ttl: leakTTL})
	}
	require.Equal(t, uint64(1), s.AbandonedHolds(), "AbandonedHolds() with a full queue")
	require.NoError(t, s.Close())
	require.Equal(t, uint64(cleanupQueue+1), s.AbandonedHolds(), "AbandonedHolds() after Close")
	s.addCleanup(cleanup{rkey: "k", member: "late", due: due, ttl: leakTTL})
	require.Equal(t, uint64(cleanupQueue+2), s.AbandonedHolds(), "AbandonedHolds() after a removal added after Close")
}

// TestCleanupDelay: the attempts fall at once, then after 1/64 of the TTL,
// doubling to at most 1/4, all of them within the TTL.
func TestCleanupDelay(t *testing.T) {
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	require.Len(t, want, cleanupAttempts)
	var sum time.Duration
	for i, w := range want {
		require.Equal(t, w, delay(16*time.Second, i), "delay(16s, %d)", i)
		sum += w
	}
	require.Less(t, sum, 16*time.Second)
	require.Equal(t, 4*time.Second, delay(16*time.Second, 100))
}

// replyError is an error reply of Redis, as go-redis returns one
// (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestMayHaveRun: which failures of an Acquire leave a hold to remove.
func TestMayHaveRun(t *testing.T) {
	n := &node{}
	for _, tc := range []struct {
		name    string
		n       *node
		err     error
		ctxDone bool
		want    bool
	}{
		{"timeout", n, unavailable(ErrTimeout, context.DeadlineExceeded), false, true},
		{"broken connection", n, unavailable(ErrRedis, io.EOF), false, true},
		{"caller's context ended", n, context.Canceled, true, true},
		{"breaker open", n, errBreakerOpen, false, false},
		{"no free slot", n, unavailable(ErrTimeout, fmt.Errorf("%w: %w", errStarved, context.DeadlineExceeded)), false, false},
		{"dial", n, unavailable(ErrRedis, &net.OpError{Op: "dial", Err: errors.New("refused")}), false, false},
		{"pool timeout", n, unavailable(ErrTimeout, redis.ErrPoolTimeout), false, false},
		{"error reply", n, unavailable(ErrRedis, replyError("CLUSTERDOWN the cluster is down")), false, false},
		{"script error", n, unavailable(ErrReply, errors.New("floodgate: holder id already holds a slot")), false, false},
		{"closed", n, unavailable(floodgate.ErrClosed, nil), false, false},
		{"no node", nil, unavailable(ErrRedis, io.EOF), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, mayHaveRun(tc.n, tc.err, tc.ctxDone), "mayHaveRun(%v)", tc.err)
		})
	}
}

// TestInflightCancelBeforeAcquire runs a cancel of three holder ids before
// their Acquires' scripts, as happens when an Acquire times out while its
// script is still queued in Redis (a stall): the cancel finds no holds and
// marks the ids, so that the Acquires, when they run, add nothing; a hold
// that is there is removed. Before, the removal found nothing, the late
// Acquire added its hold, and the hold stayed until the removal's next
// attempt, a sixteenth of the TTL later, or the TTL.
func TestInflightCancelBeforeAcquire(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv.client(t), &Options{Prefix: testPrefix(t, srv.client(t))})
	ctx := context.Background()
	rkey := s.InflightKey("cancel", "k")
	keys := []string{rkey, goneKey(rkey)}
	const ttl = 30 * time.Second
	call := func(a scripts.InflightArgs) (bool, int64) {
		t.Helper()
		args, err := s.inflightArgs(a, ttl)
		require.NoError(t, err)
		reply, _, _, err := s.callInflight(ctx, true, rkey, keys, args)
		require.NoError(t, err)
		ok, n, err := decodeInflight(reply)
		require.NoError(t, err)
		return ok, n
	}
	acquire := func(h string) (bool, int64) {
		return call(scripts.InflightArgs{Op: scripts.InflightAcquire, Holder: h, Limit: 8})
	}
	ok, n := acquire("held:1")
	require.True(t, ok)
	require.Equal(t, int64(1), n)

	ok, n = call(scripts.InflightArgs{Op: scripts.InflightCancel, Holder: "late:1", More: []string{"held:1", "late:2"}})
	require.True(t, ok, "held:1 was there to remove")
	require.Equal(t, int64(0), n)
	for _, h := range []string{"late:1", "late:2"} {
		ok, n = acquire(h)
		require.False(t, ok, "%s was cancelled before its Acquire ran", h)
		require.Equal(t, int64(0), n)
	}
	ok, n = acquire("other:1")
	require.True(t, ok, "an id that was not cancelled acquires")
	require.Equal(t, int64(1), n)
	c := srv.client(t)
	card, err := c.ZCard(ctx, rkey).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), card)
	pttl, err := c.PTTL(ctx, goneKey(rkey)).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Duration(0), "the marks expire")
	require.LessOrEqual(t, pttl, ttl+DefaultExpiryMargin+time.Second)
}

// behindProxy returns a client of the test's server, a proxy in front of
// it, and a client through the proxy that does not retry.
func behindProxy(t *testing.T) (rdb *redis.Client, px *proxy, c *redis.Client) {
	t.Helper()
	srv := newServer(t)
	px = newProxy(t, srv.addr)
	c = redis.NewClient(&redis.Options{Addr: px.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return srv.client(t), px, c
}

// TestCleanupDueWhenNodeAnswers: a removal whose attempts failed while its
// node was unreachable is made as soon as the node answers a decision,
// not at its next scheduled attempt, though the node's breaker never
// opened (two failures, under its threshold of 10) and so no probe ran.
// Before, only a probe made the removals due: a stall whose timeouts did
// not open the breaker left holds with no holder for up to half a TTL,
// which TestInflightContention found on a loaded host.
func TestCleanupDueWhenNodeAnswers(t *testing.T) {
	parallelOnMiniredis(t)
	rdb, px, c := behindProxy(t)
	s, lim := leakSetup(t, c, 10)
	ctx := context.Background()
	slot := acquireOutsideStall(t, lim, "k")
	rkey := s.InflightKey(lim.Name(), "k")

	// The node is unreachable: the Release fails, then the removal's
	// first attempt, at once.
	px.setDown(true)
	require.Error(t, slot.Release(ctx))
	var due time.Time
	require.Eventually(t, func() bool {
		s.cleaner.mu.Lock()
		defer s.cleaner.mu.Unlock()
		if len(s.cleaner.q) == 1 && s.cleaner.q[0].tries >= 1 {
			due = s.cleaner.q[0].due
			return true
		}
		return false
	}, leakWait, 5*time.Millisecond, "the removal's first attempt failed")
	require.Equal(t, BreakerClosed, s.BreakerState("k"))
	px.setDown(false)

	// A decision the node answers makes the removal due. The hold must be
	// gone before the attempt it was scheduled for (leakTTL/64 = 469ms
	// after the failed one).
	if time.Until(due) < 100*time.Millisecond {
		t.Skipf("the machine took until %v before the scheduled attempt to get here", time.Until(due))
	}
	other := acquireOutsideStall(t, lim, "other")
	defer func() { _ = other.Release(ctx) }()
	waitHolds(t, rdb, rkey, 0, "the failed Release's hold")
	require.True(t, time.Now().Before(due), "the hold was removed %v after its scheduled attempt: the node's answer did not make it due", time.Since(due))
}

// TestCleanupThroughOpenBreaker: a removal is sent though its node's
// breaker is open (it neither asks nor tells the breaker): the hold of a
// failed Release is gone while the breaker, opened by the failures of an
// outage and given a cooldown of a minute, still refuses every decision.
// Before, the removal waited behind the breaker, and a breaker that opened
// again after an outage held the holds for its cooldown.
func TestCleanupThroughOpenBreaker(t *testing.T) {
	parallelOnMiniredis(t)
	rdb, px, c := behindProxy(t)
	s := newStore(t, c, &Options{Timeout: 200 * time.Millisecond, BreakerCooldown: time.Minute})
	lim, err := inflight.New(s, 10, &inflight.Options{TTL: leakTTL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	ctx := context.Background()
	slot := acquireOutsideStall(t, lim, "k")
	rkey := s.InflightKey(lim.Name(), "k")

	px.setDown(true)
	require.Error(t, slot.Release(ctx))
	for i := 0; s.BreakerState("k") != BreakerOpen; i++ {
		require.Less(t, i, 1000, "the breaker did not open")
		_, _ = lim.Acquire(ctx, "down")
	}
	px.setDown(false)
	waitHolds(t, rdb, rkey, 0, "the failed Release's hold, behind an open breaker")
	require.Equal(t, BreakerOpen, s.BreakerState("k"))
	_, err = lim.Acquire(ctx, "k")
	require.ErrorIs(t, err, ErrBreakerOpen)
}
