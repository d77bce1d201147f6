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
)

// TestBatchAdaptsToRate drives one key at several steady rates and checks
// that the batch follows the units consumed per TargetInterval, within
// MinBatch and MaxBatch, and that at steady state almost every decision is
// local.
func TestBatchAdaptsToRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
		l := newLease(t, r, &lease.Options{MinBatch: 5, MaxBatch: 2000, TargetInterval: 100 * ms, TTL: time.Second})
		// run makes perMs decisions every millisecond for d and returns the
		// fraction of them served locally.
		run := func(perMs int, every time.Duration, d time.Duration) float64 {
			t.Helper()
			before := l.Stats()
			for end := time.Now().Add(d); time.Now().Before(end); {
				for range perMs {
					dec, err := l.Allow(ctx, "k")
					require.NoError(t, err)
					require.True(t, dec.Allowed)
				}
				time.Sleep(every)
			}
			after := l.Stats()
			local := after.Local - before.Local
			return float64(local) / float64(local+after.Waited-before.Waited+after.Forwarded-before.Forwarded)
		}
		for _, tc := range []struct {
			name      string
			perMs     int
			every     time.Duration
			want      int64 // units per 100 ms, clamped to [5, 2000]
			wantLocal float64
			tolerance float64
		}{
			{"1000/s", 1, ms, 100, 0.99, 0.2},
			{"10000/s", 10, ms, 1000, 0.99, 0.2},
			{"100/s", 1, 10 * ms, 10, 0.95, 0.3},
			{"40000/s: MaxBatch", 40, ms, 2000, 0.99, 0},
			{"10/s: MinBatch", 1, 100 * ms, 5, 0.95, 0},
		} {
			run(tc.perMs, tc.every, 2*time.Second) // settle
			local := run(tc.perMs, tc.every, 2*time.Second)
			b := l.Batch("k")
			t.Logf("%s: batch %d, local %.4f", tc.name, b, local)
			assert.InDelta(t, tc.want, b, tc.tolerance*float64(tc.want), "%s: batch %d, want about %d", tc.name, b, tc.want)
			assert.GreaterOrEqual(t, local, tc.wantLocal, "%s: local ratio", tc.name)
		}
		require.NoError(t, l.Close())
	})
}

// TestBatchGrowsWhenCallersWait: a pool that runs dry before its refill
// lands doubles its batch, so bursts stop waiting quickly.
func TestBatchGrowsWhenCallersWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
		l := newLease(t, r, &lease.Options{MinBatch: 1, MaxBatch: 1000, TTL: time.Hour})
		// A burst at one instant: every refill is drained by the burst
		// before the next, so callers wait, and the batch doubles each time.
		for range 1000 {
			_, err := l.Allow(ctx, "k")
			require.NoError(t, err)
		}
		s := l.Stats()
		assert.LessOrEqual(t, s.Waited, int64(12), "waits: about log2(1000)")
		assert.Zero(t, s.Forwarded)
		require.NoError(t, l.Close())
	})
}

// TestBatchNotDoubledWhenShort: while the remote grants fewer units than
// asked (running low, or a region's store near its grant), the refills
// that follow at once are not a burst: the batch keeps following the
// key's rate instead of doubling to MaxBatch, so that once the remote has
// units again a process does not grab MaxBatch of them.
func TestBatchNotDoubledWhenShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
		l := newLease(t, r, &lease.Options{MaxBatch: 1000, TTL: time.Hour})
		r.short.Store(1)
		for range 200 { // 100/s for 2s: a batch of about 10
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			time.Sleep(10 * time.Millisecond)
		}
		r.short.Store(0)
		for range 10 {
			_, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("batch %d, held %d", l.Batch("k"), l.Held("k"))
		assert.LessOrEqual(t, l.Batch("k"), int64(40), "the batch follows 100/s, not the short grants")
		assert.LessOrEqual(t, l.Held("k"), int64(40))
		require.NoError(t, l.Close())
	})
}

// TestBatchRateMeasuredOverTime: a key's first refills come one right
// after another (the pool of the first is a unit or two), and a unit
// consumed over one round trip is not the key's rate: the batch of a key
// used 50 times a second stays near its 100ms of use (5) rather than a
// unit per round trip (100 at a 1ms round trip).
func TestBatchRateMeasuredOverTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
		r.delay.Store(int64(time.Millisecond))
		l := newLease(t, r, &lease.Options{MaxBatch: 1000})
		most := int64(0)
		for range 100 { // 50/s for 2s
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			most = max(most, l.Batch("k"), l.Held("k"))
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("largest batch or pool: %d", most)
		assert.LessOrEqual(t, most, int64(15))
		require.NoError(t, l.Close())
	})
}
