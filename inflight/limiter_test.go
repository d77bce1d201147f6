package inflight_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is an inflight.Store whose holds expire, on the clock of the test
// (virtual inside a synctest bubble): Redis in miniature.
type fake struct {
	mu       sync.Mutex
	holds    map[nameKey]map[uint64]time.Time // (name, key) -> id -> expiry
	next     uint64
	renewals atomic.Int64
	releases atomic.Int64
	failNext atomic.Int64 // Renews to fail with an error
	lose     atomic.Bool  // forget every hold at the next Renew
}

// nameKey is a key under a limiter name.
type nameKey struct{ name, key string }

func newFake() *fake { return &fake{holds: map[nameKey]map[uint64]time.Time{}} }

var errDown = errors.New("fake: down")

func (f *fake) Acquire(_ context.Context, name, key string, limit int64, ttl time.Duration) (inflight.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	hs := f.holds[nameKey{name, key}]
	if hs == nil {
		hs = map[uint64]time.Time{}
		f.holds[nameKey{name, key}] = hs
	}
	for id, exp := range hs {
		if !exp.After(now) {
			delete(hs, id)
		}
	}
	if int64(len(hs)) >= limit {
		return inflight.Result{InFlight: int64(len(hs))}, nil
	}
	f.next++
	hs[f.next] = now.Add(ttl)
	return inflight.Result{Allowed: true, InFlight: int64(len(hs)), Hold: inflight.Hold{ID: f.next, Expires: true}}, nil
}

func (f *fake) Renew(_ context.Context, name, key string, h inflight.Hold, ttl time.Duration) (bool, error) {
	f.renewals.Add(1)
	if f.failNext.Load() > 0 {
		f.failNext.Add(-1)
		return false, errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lose.Load() {
		clear(f.holds)
	}
	now := time.Now()
	nk := nameKey{name, key}
	exp, ok := f.holds[nk][h.ID]
	if !ok || !exp.After(now) {
		return false, nil
	}
	f.holds[nk][h.ID] = now.Add(ttl)
	return true, nil
}

func (f *fake) Release(_ context.Context, name, key string, h inflight.Hold) error {
	f.releases.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.holds[nameKey{name, key}], h.ID)
	return nil
}

func newLimiter(t *testing.T, s inflight.Store, limit int64, o *inflight.Options) *inflight.Limiter {
	t.Helper()
	l, err := inflight.New(s, limit, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestNewErrors(t *testing.T) {
	s := newFake()
	for _, c := range []struct {
		name  string
		store inflight.Store
		limit int64
		o     *inflight.Options
	}{
		{"nil store", nil, 1, nil},
		{"limit 0", s, 0, nil},
		{"negative limit", s, -3, nil},
		{"negative TTL", s, 1, &inflight.Options{TTL: -time.Second}},
		{"TTL below MinTTL", s, 1, &inflight.Options{TTL: time.Microsecond}},
		{"negative RenewEvery", s, 1, &inflight.Options{RenewEvery: -time.Second}},
		{"RenewEvery = TTL", s, 1, &inflight.Options{TTL: time.Second, RenewEvery: time.Second}},
		{"RenewEvery > default TTL", s, 1, &inflight.Options{RenewEvery: time.Minute}},
		{"negative RetryAfter", s, 1, &inflight.Options{RetryAfter: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := inflight.New(c.store, c.limit, c.o)
			assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
			assert.Nil(t, l)
		})
	}
	l, err := inflight.New(s, 1, &inflight.Options{TTL: inflight.MinTTL})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

func TestAcquireErrors(t *testing.T) {
	s := inflight.NewLocalStore()
	l := newLimiter(t, s, 1, nil)
	ctx := context.Background()
	_, err := l.Acquire(ctx, "")
	assert.ErrorIs(t, err, floodgate.ErrEmptyKey)
	_, err = l.Acquire(ctx, strings.Repeat("k", floodgate.MaxKeyLen+1))
	assert.ErrorIs(t, err, floodgate.ErrKeyTooLong)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Acquire(done, "k")
	assert.ErrorIs(t, err, context.Canceled)
	slot, err := l.Acquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, slot.Allowed)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
	_, err = l.Acquire(ctx, "k")
	assert.ErrorIs(t, err, floodgate.ErrClosed)
	// A slot held across Close is still released.
	require.NoError(t, slot.Release(ctx))
	res, err := s.Acquire(ctx, l.Name(), "k", 1, time.Second)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

func TestStoreError(t *testing.T) {
	l := newLimiter(t, failing{}, 1, nil)
	_, err := l.Acquire(context.Background(), "k")
	assert.ErrorIs(t, err, floodgate.ErrUnavailable)
}

type failing struct{}

func (failing) Acquire(context.Context, string, string, int64, time.Duration) (inflight.Result, error) {
	return inflight.Result{}, floodgate.ErrUnavailable
}
func (failing) Renew(context.Context, string, string, inflight.Hold, time.Duration) (bool, error) {
	return false, floodgate.ErrUnavailable
}
func (failing) Release(context.Context, string, string, inflight.Hold) error {
	return floodgate.ErrUnavailable
}

// TestRenewal: a slot held for 10 TTLs is renewed about every RenewEvery
// and never taken by another client; a request shorter than RenewEvery
// costs no renewal.
func TestRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		const ttl = time.Second
		holder := newLimiter(t, f, 1, &inflight.Options{TTL: ttl})
		other := newLimiter(t, f, 1, &inflight.Options{TTL: ttl})
		ctx := context.Background()

		short, err := holder.Acquire(ctx, "short")
		require.NoError(t, err)
		time.Sleep(ttl/3 - time.Millisecond)
		require.NoError(t, short.Release(ctx))
		time.Sleep(10 * ttl)
		require.Zero(t, f.renewals.Load(), "renewals of a request shorter than RenewEvery")

		slot, err := holder.Acquire(ctx, "k")
		require.NoError(t, err)
		for range 100 {
			time.Sleep(ttl / 10)
			d, err := other.Acquire(ctx, "k")
			require.NoError(t, err)
			require.False(t, d.Allowed, "another client took a renewed slot")
		}
		synctest.Wait()
		// Renewals at 1/3, 2/3, ... of each TTL: 30 in 10 TTLs.
		require.Equal(t, int64(30), f.renewals.Load(), "renewals in 10 TTLs")
		require.NoError(t, slot.Release(ctx))
		time.Sleep(10 * ttl)
		require.Equal(t, int64(30), f.renewals.Load(), "renewals after the Release")
		d, err := other.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, d.Release(ctx))
	})
}

// TestRenewalFailure: a renewal that fails is tried again RenewEvery later,
// and the slot survives if that one succeeds within the TTL; two failures
// of the default RenewEvery in a row lose it.
func TestRenewalFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		const ttl = 3 * time.Second
		l := newLimiter(t, f, 1, &inflight.Options{TTL: ttl})
		ctx := context.Background()
		f.failNext.Store(1)
		slot, err := l.Acquire(ctx, "k")
		require.NoError(t, err)
		time.Sleep(ttl + ttl/2)
		d, err := l.Acquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, d.Allowed, "the slot survived a failed renewal")
		require.NoError(t, slot.Release(ctx))

		// Two failures in a row, and the hold is gone at its TTL.
		f.failNext.Store(2)
		lost, err := l.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, lost.Allowed)
		time.Sleep(ttl + ttl/2)
		d, err = l.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, d.Allowed, "a slot outlived its TTL without a renewal")
	})
}

// TestRenewalLost: a renewal that finds the hold gone stops renewing it,
// and its Release has nothing to free.
func TestRenewalLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		const ttl = time.Second
		l := newLimiter(t, f, 2, &inflight.Options{TTL: ttl})
		ctx := context.Background()
		slot, err := l.Acquire(ctx, "k")
		require.NoError(t, err)
		f.lose.Store(true)
		time.Sleep(ttl)
		synctest.Wait()
		f.lose.Store(false)
		n := f.renewals.Load()
		require.Equal(t, int64(1), n, "renewals until the loss")
		time.Sleep(5 * ttl)
		require.Equal(t, n, f.renewals.Load(), "renewals of a lost hold")
		require.NoError(t, slot.Release(ctx))
		require.Zero(t, f.releases.Load(), "store Releases of a lost hold")
	})
}

// TestCloseStopsRenewals: after Close, held slots expire within the TTL
// and the renewer's goroutine has ended.
func TestCloseStopsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		const ttl = time.Second
		l, err := inflight.New(f, 1, &inflight.Options{TTL: ttl})
		require.NoError(t, err)
		ctx := context.Background()
		slot, err := l.Acquire(ctx, "k")
		require.NoError(t, err)
		time.Sleep(ttl / 2) // one renewal
		require.NoError(t, l.Close())
		synctest.Wait() // the renewer is gone: nothing left to run
		n := f.renewals.Load()
		require.Equal(t, int64(1), n)
		time.Sleep(ttl)
		res, err := f.Acquire(ctx, l.Name(), "k", 1, ttl)
		require.NoError(t, err)
		require.True(t, res.Allowed, "a slot outlived its TTL after Close")
		require.Equal(t, n, f.renewals.Load())
		// Its Release still goes to the store, which frees nothing of the
		// new holder's.
		require.NoError(t, slot.Release(ctx))
		require.Equal(t, int64(1), f.releases.Load())
	})
}

// TestManyDue: holds that fall due together are all renewed in time, in
// parallel.
func TestManyDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		const ttl = time.Second
		l := newLimiter(t, f, 1000, &inflight.Options{TTL: ttl})
		ctx := context.Background()
		slots := make([]inflight.Slot, 500)
		for i := range slots {
			var err error
			slots[i], err = l.Acquire(ctx, "k")
			require.NoError(t, err)
			require.True(t, slots[i].Allowed)
		}
		time.Sleep(5 * ttl)
		res, err := f.Acquire(ctx, l.Name(), "k", 1000, ttl)
		require.NoError(t, err)
		require.Equal(t, int64(501), res.InFlight, "holds alive after 5 TTLs")
		require.NoError(t, f.Release(ctx, l.Name(), "k", res.Hold))
		for _, s := range slots {
			require.NoError(t, s.Release(ctx))
		}
		require.Equal(t, int64(500*15), f.renewals.Load())
	})
}

// TestReleaseOnce: concurrent Releases of one Slot and its copies reach the
// store once.
func TestReleaseOnce(t *testing.T) {
	f := newFake()
	l := newLimiter(t, f, 1, nil)
	ctx := context.Background()
	for range 50 {
		before := f.releases.Load()
		slot, err := l.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, slot.Allowed)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			c := slot
			go func() {
				defer wg.Done()
				assert.NoError(t, c.Release(ctx))
			}()
		}
		wg.Wait()
		require.Equal(t, before+1, f.releases.Load())
	}
}

// TestSlotZero: the zero Slot and a denial hold nothing.
func TestSlotZero(t *testing.T) {
	var s inflight.Slot
	require.NoError(t, s.Release(context.Background()))
	require.False(t, s.Allowed)
}
