package lease_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// reporter is a remote that reports another algorithm than it runs.
type reporter struct {
	*remote
	reported floodgate.Algorithm
}

func (r reporter) Algorithm() floodgate.Algorithm { return r.reported }

func TestNewErrors(t *testing.T) {
	fw := floodgate.FixedWindow{Limit: 100, Window: time.Minute}
	r := newRemote(t, fw)
	withAlg := func(o lease.Options) *lease.Options { return &o }
	for _, tc := range []struct {
		name   string
		remote floodgate.Limiter
		opts   *lease.Options
		want   error
	}{
		{"nil remote", nil, withAlg(lease.Options{}), floodgate.ErrInvalidConfig},
		{"no algorithm", reporter{r, nil}, nil, floodgate.ErrInvalidConfig},
		{"invalid algorithm", reporter{r, floodgate.FixedWindow{}}, nil, floodgate.ErrInvalidConfig},
		{"policy disagrees", reporter{r, floodgate.FixedWindow{Limit: 99, Window: time.Minute}}, nil, floodgate.ErrInvalidConfig},
		{"leaky bucket", newRemote(t, floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 100}), nil, floodgate.ErrInvalidConfig},
		{"Limits", newRemote(t, floodgate.Limits{fw, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 100}}), nil, floodgate.ErrInvalidConfig},
		{"negative MinBatch", r, withAlg(lease.Options{MinBatch: -1}), lease.ErrInvalidOptions},
		{"negative MaxBatch", r, withAlg(lease.Options{MaxBatch: -1}), lease.ErrInvalidOptions},
		{"MinBatch above MaxBatch", r, withAlg(lease.Options{MinBatch: 11, MaxBatch: 10}), lease.ErrInvalidOptions},
		{"MinBatch above the quota", r, withAlg(lease.Options{MinBatch: 101}), lease.ErrInvalidOptions},
		{"LowWater above 1", r, withAlg(lease.Options{LowWater: 1.5}), lease.ErrInvalidOptions},
		{"negative LowWater", r, withAlg(lease.Options{LowWater: -0.5}), lease.ErrInvalidOptions},
		{"NaN LowWater", r, withAlg(lease.Options{LowWater: math.NaN()}), lease.ErrInvalidOptions},
		{"negative TargetInterval", r, withAlg(lease.Options{TargetInterval: -time.Second}), lease.ErrInvalidOptions},
		{"negative TTL", r, withAlg(lease.Options{TTL: -time.Second}), lease.ErrInvalidOptions},
		{"negative Timeout", r, withAlg(lease.Options{Timeout: -time.Second}), lease.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := lease.New(tc.remote, tc.opts)
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, l)
		})
	}
}

func TestNewAlgorithmReported(t *testing.T) {
	fw := floodgate.FixedWindow{Limit: 100, Window: time.Minute}
	r := newRemote(t, fw)
	l, err := lease.New(r, nil)
	require.NoError(t, err)
	assert.Equal(t, fw.Policy(), l.Policy())
	require.NoError(t, l.Close())
}

func TestArgumentErrors(t *testing.T) {
	r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Minute})
	l := newLease(t, r, nil)
	defer func() { require.NoError(t, l.Close()) }()
	ctx := context.Background()
	long := string(make([]byte, floodgate.MaxKeyLen+1))
	for _, tc := range []struct {
		name string
		key  string
		n    int64
		want error
	}{
		{"empty key", "", 1, floodgate.ErrEmptyKey},
		{"long key", long, 1, floodgate.ErrKeyTooLong},
		{"zero n", "k", 0, floodgate.ErrInvalidN},
		{"n above the quota", "k", 101, floodgate.ErrExceedsLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.AllowN(ctx, tc.key, tc.n)
			assert.ErrorIs(t, err, tc.want, "AllowN")
			_, err = l.Reserve(ctx, tc.key, tc.n, time.Second)
			assert.ErrorIs(t, err, tc.want, "Reserve")
			assert.ErrorIs(t, l.Wait(ctx, tc.key, tc.n), tc.want, "Wait")
		})
	}
	// The fast path checks n too, once the key has a pool.
	_, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	_, err = l.AllowN(ctx, "k", 0)
	assert.ErrorIs(t, err, floodgate.ErrInvalidN)
	_, err = l.AllowN(ctx, "k", 101)
	assert.ErrorIs(t, err, floodgate.ErrExceedsLimit)
	_, err = l.Reserve(ctx, "k", 1, -time.Second)
	assert.ErrorIs(t, err, floodgate.ErrInvalidDelay)
	assert.Zero(t, r.allowN.Load()+r.reserves.Load()+r.waits.Load(), "no bad argument reaches the remote")
}

func TestAllowServesFromPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Hour, Observer: rec.observer()})

		// The first decision waits for a lease of 10: 1 used, 9 left, and
		// the remote has 990 more. The gate holds the round trip until the
		// decision waits for it, so that the lease counts its waiter.
		r.gate = make(chan struct{})
		var (
			d   floodgate.Decision
			err error
		)
		first := make(chan struct{})
		go func() {
			defer close(first)
			d, err = l.Allow(ctx, "k")
		}()
		synctest.Wait()
		r.gate <- struct{}{}
		<-first
		require.NoError(t, err)
		assert.Equal(t, floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 9 + 990, ResetAfter: time.Hour}, d)
		assert.EqualValues(t, 1, r.upTo.Load())

		// The next 4 are local; the 5th leaves 4 < LowWater·10 = 5 and
		// starts a refill of 6 in the background, which the gate holds
		// until that decision has returned: its Remaining is read before
		// the refill lands (or, racing it, from a pool and a remote count
		// of different instants).
		time.Sleep(time.Minute)
		for i := range 5 {
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			assert.Equal(t, floodgate.Decision{Allowed: true, Limit: 1000, Remaining: int64(8-i) + 990, ResetAfter: 59 * time.Minute}, d, "Allow #%d", i+2)
		}
		close(r.gate) // the refill, and every round trip after it, go through
		synctest.Wait()
		assert.Equal(t, []int64{10, 6}, r.asks())
		assert.EqualValues(t, 10, l.Held("k"))
		d, err = l.Allow(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 9 + 984, ResetAfter: 59 * time.Minute}, d)

		assert.Equal(t, lease.Stats{Local: 6, Waited: 1, Leases: 2, Leased: 16}, l.Stats())
		assert.InDelta(t, 6.0/7, l.Stats().LocalRatio(), 1e-9)
		leases := rec.leased()
		require.Len(t, leases, 2)
		assert.Equal(t, observe.Lease{Name: "lease", Key: "k", Units: 10, Granted: 10, Waited: 1}, leases[0])
		assert.Equal(t, observe.Lease{Name: "lease", Key: "k", Units: 6, Granted: 6, Local: 5}, leases[1])

		require.NoError(t, l.Close())
		assert.EqualValues(t, 1000-7, remoteLeft(t, r, "k", 1000), "after Close the remote counts the 7 admitted")
	})
}

func TestWaitersShareOneRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		r.gate = make(chan struct{})
		l := newLease(t, r, &lease.Options{MinBatch: 16, MaxBatch: 16})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				d, err := l.Allow(ctx, "k")
				assert.NoError(t, err)
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		synctest.Wait()
		assert.EqualValues(t, 1, r.upTo.Load(), "16 callers of an empty pool make one round trip")
		close(r.gate)
		wg.Wait()
		assert.EqualValues(t, 16, admitted.Load())
		s := l.Stats()
		assert.EqualValues(t, 16, s.Waited)
		assert.Zero(t, s.Forwarded)
		require.NoError(t, l.Close())
		assert.EqualValues(t, 1000-16, remoteLeft(t, r, "k", 1000))
	})
}

func TestWaiterBoundedByContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		r.gate = make(chan struct{})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10})

		ctx, cancel := context.WithTimeout(context.Background(), 10*ms)
		defer cancel()
		start := time.Now()
		_, err := l.Allow(ctx, "k")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 10*ms, time.Since(start), "the caller waited until its deadline, no longer")

		// The refill goes on without the caller and fills the pool.
		close(r.gate)
		synctest.Wait()
		d, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.EqualValues(t, 1, r.upTo.Load())
		require.NoError(t, l.Close())
		assert.EqualValues(t, 999, remoteLeft(t, r, "k", 1000))
	})
}

func TestRefillTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		r.gate = make(chan struct{})
		l := newLease(t, r, &lease.Options{Timeout: 50 * ms})
		start := time.Now()
		_, err := l.Allow(context.Background(), "k")
		assert.ErrorIs(t, err, floodgate.ErrUnavailable, "the Limiter's own timeout is the remote's failure")
		assert.Equal(t, 50*ms, time.Since(start))
		close(r.gate)
		require.NoError(t, l.Close())
	})
}

func TestRemoteErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10})

		r.setFail(errDown)
		_, err := l.Allow(ctx, "k")
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
		assert.EqualValues(t, 1, r.upTo.Load())

		// Units leased before a failure are served until they run out.
		r.setFail(nil)
		_, err = l.Allow(ctx, "k")
		require.NoError(t, err)
		r.setFail(errDown)
		for i := range 9 {
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err, "Allow #%d", i)
			assert.True(t, d.Allowed)
			synctest.Wait()
		}
		upTo := r.upTo.Load()
		assert.EqualValues(t, 3, upTo, "one background refill failed, and quiets the next ones")
		_, err = l.Allow(ctx, "k")
		require.ErrorIs(t, err, floodgate.ErrUnavailable)
		r.setFail(nil)
		require.NoError(t, l.Close())
		assert.EqualValues(t, 990, remoteLeft(t, r, "k", 1000))
	})
}

func TestDeniedRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 10, Window: time.Second})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10})
		time.Sleep(200 * ms)
		for i := range 10 {
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed, "Allow #%d", i)
			synctest.Wait()
		}
		assert.EqualValues(t, 2, r.upTo.Load(), "the denied background refill quiets the others")

		// One unit: the refill's denial is the decision.
		d, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, floodgate.Decision{Limit: 10, RetryAfter: 800 * ms, ResetAfter: 800 * ms}, d)
		assert.EqualValues(t, 3, r.upTo.Load())
		assert.Zero(t, r.allowN.Load())
		// More units: the remote decides, for the RetryAfter of n units.
		d, err = l.AllowN(ctx, "k", 2)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, 800*ms, d.RetryAfter)
		assert.EqualValues(t, 1, r.allowN.Load())
		require.NoError(t, l.Close())
	})
}

func TestReserveAndWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		tb := floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}
		r := newRemote(t, tb)
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10})

		// A pool admits at once.
		d, err := l.Reserve(ctx, "k", 1, time.Second)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Zero(t, d.Delay)
		require.NoError(t, l.Wait(ctx, "k", 1))
		for range 8 {
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		synctest.Wait()
		assert.Zero(t, r.reserves.Load()+r.waits.Load())

		// The lease took the whole bucket: the remote reserves into debt.
		d, err = l.Reserve(ctx, "k", 1, time.Second)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, 100*ms, d.Delay)
		assert.EqualValues(t, 1, r.reserves.Load())

		start := time.Now()
		require.NoError(t, l.Wait(ctx, "k", 1))
		assert.Equal(t, 200*ms, time.Since(start), "Wait slept through the remote's delay")
		assert.EqualValues(t, 1, r.waits.Load())

		// A caller that gave up takes nothing, even from a pool.
		done, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, l.Wait(done, "k", 1), context.Canceled)

		// Reserve with no delay allowed is AllowN.
		d, err = l.Reserve(ctx, "k", 1, 0)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Zero(t, r.allowN.Load())
		require.NoError(t, l.Close())
	})
}

func TestLargeRequestsGoToTheRemote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		l := newLease(t, r, &lease.Options{MaxBatch: 10})
		d, err := l.AllowN(context.Background(), "k", 11)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.EqualValues(t, 1, r.allowN.Load())
		assert.Zero(t, r.upTo.Load())
		assert.Equal(t, lease.Stats{Forwarded: 1}, l.Stats())
		require.NoError(t, l.Close())
		assert.EqualValues(t, 989, remoteLeft(t, r, "k", 1000))
	})
}

func TestCloseReturnsUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, Observer: rec.observer()})
		for _, key := range []string{"a", "b", "c"} {
			_, err := l.AllowN(ctx, key, 3)
			require.NoError(t, err)
		}
		require.NoError(t, l.Close())
		require.NoError(t, l.Close(), "Close is safe to call twice")
		for _, key := range []string{"a", "b", "c"} {
			assert.EqualValues(t, 997, remoteLeft(t, r, key, 1000), key)
		}
		returns := rec.returned()
		require.Len(t, returns, 3)
		for _, e := range returns {
			assert.Equal(t, observe.Return{Name: "lease", Key: e.Key, Units: 7, Granted: 7, Reason: "closed"}, e)
		}
		_, err := l.Allow(ctx, "a")
		assert.ErrorIs(t, err, lease.ErrClosed)
		_, err = l.Allow(ctx, "new")
		assert.ErrorIs(t, err, lease.ErrClosed)
		assert.ErrorIs(t, l.Wait(ctx, "a", 1), lease.ErrClosed)
		assert.Equal(t, int64(3*7), l.Stats().Returned)
	})
}

func TestCloseWaitsForRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		r.gate = make(chan struct{})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10})
		errc := make(chan error, 1)
		go func() {
			_, err := l.Allow(context.Background(), "k")
			errc <- err
		}()
		synctest.Wait()
		closed := make(chan struct{})
		go func() {
			assert.NoError(t, l.Close())
			close(closed)
		}()
		go func() { assert.NoError(t, l.Close()) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a refill was in flight")
		default:
		}
		close(r.gate)
		<-closed
		// The waiting caller either got a unit before Close swept the pool
		// or found the Limiter closed; every other unit went back.
		err := <-errc
		want := int64(1000)
		if err == nil {
			want--
		} else {
			assert.ErrorIs(t, err, lease.ErrClosed)
		}
		assert.Equal(t, want, remoteLeft(t, r, "k", 1000))
	})
}

// TestObserverMayCallTheLimiter: observers run under no lock of the
// Limiter's, so they may call it, its per-key lock included (Batch).
func TestObserverMayCallTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		var l *lease.Limiter
		var leases, returns atomic.Int64
		obs := &observe.Observer{
			OnLease: func(_ context.Context, e observe.Lease) {
				_ = l.Stats()
				_ = l.Batch(e.Key)
				if leases.Add(1) == 1 {
					_, err := l.Allow(context.Background(), "other")
					assert.NoError(t, err)
				}
			},
			OnReturn: func(_ context.Context, e observe.Return) {
				_ = l.Stats()
				_ = l.Batch(e.Key)
				returns.Add(1)
			},
		}
		l = newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, Observer: obs})
		_, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, l.Close())
		assert.EqualValues(t, 2, leases.Load(), "k's lease and other's")
		assert.EqualValues(t, 2, returns.Load(), "both pools, on Close")
	})
}

func TestFailOpenGrantsAreNotRefunded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		// What redisstore's FailOpen returns for a take up to n.
		r.fake = func(n int64) floodgate.Result {
			return floodgate.Result{At: time.Now(), Granted: n,
				Decision: floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 1000 - n}}
		}
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, Observer: rec.observer()})
		d, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		assert.True(t, d.Allowed, "the store's fail-open policy admits")
		require.NoError(t, l.Close())
		assert.Zero(t, r.refunds.Load(), "units the remote never counted are not given back")
		returns := rec.returned()
		require.Len(t, returns, 1)
		assert.Equal(t, observe.Return{Name: "lease", Key: "k", Units: 9, Reason: "closed"}, returns[0])
	})
}

func TestClockBackwards(t *testing.T) {
	clock := floodgatetest.NewClock(time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC))
	store, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	r := wrap(t, store, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
	l := newLease(t, r, &lease.Options{Now: clock.Now, MinBatch: 10, MaxBatch: 10, TTL: time.Hour})
	ctx := context.Background()
	for range 2 {
		_, err := l.Allow(ctx, "k")
		require.NoError(t, err)
	}
	assert.EqualValues(t, 1, r.upTo.Load())
	clock.Advance(-time.Second)
	_, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	assert.EqualValues(t, 2, r.upTo.Load(), "a clock before the lease's start ends the lease")
	require.NoError(t, l.Close())
	assert.EqualValues(t, 997, remoteLeft(t, r, "k", 1000))
}

func TestIdleKeysAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: 24 * time.Hour})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Second})
		for i := range 100 {
			_, err := l.Allow(context.Background(), string(rune('a'+i%26))+string(rune('a'+i/26)))
			require.NoError(t, err)
		}
		assert.Equal(t, 100, l.Keys())
		time.Sleep(999 * ms)
		synctest.Wait()
		assert.Equal(t, 100, l.Keys())
		assert.Zero(t, r.refunds.Load())
		time.Sleep(ms)
		synctest.Wait()
		assert.Zero(t, l.Keys(), "no refill for a TTL: the pools expired and the keys are forgotten")
		assert.EqualValues(t, 900, r.refunded.Load(), "expired units went back")
		// A forgotten key starts over.
		_, err := l.Allow(context.Background(), "aa")
		require.NoError(t, err)
		assert.Equal(t, 1, l.Keys())
		require.NoError(t, l.Close())
		assert.EqualValues(t, 998, remoteLeft(t, r, "aa", 1000))
	})
}

func TestLocalDecisionAllocatesNothing(t *testing.T) {
	r := newRemote(t, floodgate.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour})
	// A batch larger than the runs: no refill during the measurement, whose
	// allocations (amortized over a batch) would otherwise round away.
	// Observed: what the Observer is told of is round trips, never a local
	// decision.
	rec := &recorder{}
	l := newLease(t, r, &lease.Options{MinBatch: 1 << 20, MaxBatch: 1 << 20, TTL: time.Hour, Observer: rec.observer()})
	ctx := context.Background()
	_, err := l.Allow(ctx, "k")
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(10000, func() {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("Allow = %v, %v", d, err)
		}
	})
	assert.Zero(t, allocs)
	assert.EqualValues(t, 1, r.upTo.Load())
	// The round trip reports its event once its caller has taken its
	// units, on its own goroutine, which Close waits for.
	require.NoError(t, l.Close())
	assert.Len(t, rec.leased(), 1)
}
