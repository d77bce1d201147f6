package lease_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/observe"
)

// The tests below run on synctest's virtual clock, which starts at
// 2000-01-01 00:00:00 UTC: windows of a second start at whole seconds.

// allowAll calls Allow n times at the current instant and returns how many
// were admitted.
func allowAll(t *testing.T, l leased, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		d, err := l.Allow(context.Background(), key)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

// TestExpiryFixedWindow: units counted in one window are never used in the
// next; at the window's end they are dropped without a refund, since the
// remote's count resets.
func TestExpiryFixedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 10, Window: time.Second})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Hour, Observer: rec.observer()})
		time.Sleep(500 * ms)
		require.Equal(t, 3, allowAll(t, l, "k", 3)) // a lease of 10 at 0.5 s; 7 left
		require.EqualValues(t, 1, r.upTo.Load())

		// 0.4 ms before the window ends, the 7 units are gone already:
		// the lease ended 1/1024 of its window's remaining half second
		// early, and the remote's window has no unit left.
		time.Sleep(499*ms + 600*time.Microsecond)
		synctest.Wait()
		assert.Zero(t, l.Held("k"))
		assert.Zero(t, allowAll(t, l, "k", 5))
		assert.Zero(t, r.refunds.Load())
		returns := rec.returned()
		require.Len(t, returns, 1)
		assert.Equal(t, observe.Return{Name: testName, Key: "k", Units: 7, Reason: "expired"}, returns[0])

		// The next window admits its Limit, and nothing of the last one.
		time.Sleep(400 * time.Microsecond)
		assert.Equal(t, 10, allowAll(t, l, "k", 20))
		require.NoError(t, l.Close())
	})
}

// TestExpiryFixedWindowDeadline checks the instant a lease ends against the
// window it was counted in, leased at several offsets.
func TestExpiryFixedWindowDeadline(t *testing.T) {
	for _, offset := range []time.Duration{0, 1, 250 * ms, 999 * ms, time.Second - time.Microsecond} {
		t.Run(offset.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Second})
				l := newLease(t, r, &lease.Options{MinBatch: 100, MaxBatch: 100, TTL: time.Hour})
				time.Sleep(offset)
				require.Equal(t, 1, allowAll(t, l, "k", 1))
				left := time.Second - offset
				end := left - left/1024      // what the lease keeps
				const tick = time.Nanosecond // the virtual clock's resolution
				if end > tick {
					time.Sleep(end - tick)
					require.Equal(t, 1, allowAll(t, l, "k", 1))
					assert.EqualValues(t, 1, r.upTo.Load(), "served by the lease until its end")
					time.Sleep(tick)
				} else {
					time.Sleep(end)
				}
				// At the lease's end the next decision needs the remote, in
				// the same window still (or the next one, at its start).
				require.Equal(t, 1, allowAll(t, l, "k", 1))
				assert.EqualValues(t, 2, r.upTo.Load(), "a new lease after %v", time.Since(time.Unix(946684800, 0).UTC()))
				require.NoError(t, l.Close())
			})
		})
	}
}

// TestExpirySlidingWindow: the same expiry, and the unused units go back
// into the counter they were counted in before the window ends.
func TestExpirySlidingWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.SlidingWindow{Limit: 10, Window: time.Second})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Hour, Observer: rec.observer()})
		time.Sleep(500 * ms)
		require.Equal(t, 3, allowAll(t, l, "k", 3)) // a lease of 10 at 0.5 s
		time.Sleep(500 * ms)
		synctest.Wait()
		returns := rec.returned()
		require.Len(t, returns, 1)
		assert.Equal(t, observe.Return{Name: testName, Key: "k", Units: 7, Granted: 7, Reason: "expired"}, returns[0])
		// At 1 s, the previous window counts the 3 used, at full weight:
		// 7 units fit, none of them from the old lease.
		assert.Equal(t, 7, allowAll(t, l, "k", 20))
		time.Sleep(500 * ms)
		// At 1.5 s: est = 3·0.5 + 7 = 8.5; 1 fits.
		assert.Equal(t, 1, allowAll(t, l, "k", 20))
		require.NoError(t, l.Close())
	})
}

// TestExpiryTokenBucket: tokens taken earlier are spent later, until the
// TTL; then the unused ones that have not refilled go back.
func TestExpiryTokenBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 10})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: 5 * time.Second, Observer: rec.observer()})
		require.Equal(t, 2, allowAll(t, l, "k", 2)) // the whole bucket at 0
		time.Sleep(4 * time.Second)
		require.Equal(t, 1, allowAll(t, l, "k", 1))
		assert.EqualValues(t, 1, r.upTo.Load(), "tokens leased at 0 are spent at 4 s")
		time.Sleep(time.Second)
		synctest.Wait()
		// At 5 s, 5 of the 10 tokens have refilled: 5 of the 7 unused can
		// come back, and the bucket is full again, no fuller.
		returns := rec.returned()
		require.Len(t, returns, 1)
		assert.Equal(t, observe.Return{Name: testName, Key: "k", Units: 7, Granted: 5, Reason: "expired"}, returns[0])
		assert.EqualValues(t, 10, remoteLeft(t, r, "k", 10))
		require.NoError(t, l.Close())
	})
}

// TestExpirySlidingLog: units leased and logged at one instant expire
// after the TTL and leave the log.
func TestExpirySlidingLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.SlidingLog{Limit: 10, Window: 10 * time.Second})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Second, Observer: rec.observer()})
		require.Equal(t, 4, allowAll(t, l, "k", 4)) // 10 logged at 0
		time.Sleep(time.Second)
		synctest.Wait()
		returns := rec.returned()
		require.Len(t, returns, 1)
		assert.Equal(t, observe.Return{Name: testName, Key: "k", Units: 6, Granted: 6, Reason: "expired"}, returns[0])
		assert.EqualValues(t, 6, remoteLeft(t, r, "k", 10), "the log holds the 4 used")
		require.NoError(t, l.Close())
	})
}

// TestSlidingLogRefundsPerLease: a pool of several leases gives units back
// at the instants they were logged, newest first.
func TestSlidingLogRefundsPerLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.SlidingLog{Limit: 100, Window: time.Hour})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Hour})
		t0 := time.Now()
		require.Equal(t, 6, allowAll(t, l, "k", 6)) // 10 at 0, 4 left: refill 6 at 0
		synctest.Wait()
		time.Sleep(time.Second)
		require.Equal(t, 6, allowAll(t, l, "k", 6)) // 4 left: refill 6 at 1 s
		synctest.Wait()
		require.Equal(t, []int64{10, 6, 6}, r.asks())
		require.NoError(t, l.Close())
		// 10 held: the 6 of the lease at 1 s and 4 of the one at 0.
		r.mu.Lock()
		defer r.mu.Unlock()
		assert.Equal(t, []refundCall{{n: 6, at: t0.Add(time.Second)}, {n: 4, at: t0}}, r.refLogs)
		assert.EqualValues(t, 10, r.refunded.Load())
	})
}

// TestTTLExtendsWithRefills: a busy key's pool lives as long as it is
// refilled; the TTL counts from the last lease.
func TestTTLExtendsWithRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 1000})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: 100 * ms})
		for range 50 {
			require.Equal(t, 3, allowAll(t, l, "k", 3))
			synctest.Wait()
			time.Sleep(30 * ms)
		}
		assert.Zero(t, r.refunds.Load(), "no pool expired")
		assert.Zero(t, l.Stats().Waited-1, "only the first decision waited")
		require.NoError(t, l.Close())
	})
}
