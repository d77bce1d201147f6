package lease_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
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

func TestNewErrors(t *testing.T) {
	r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Minute})
	withAlg := func(o lease.Options) *lease.Options { return &o }
	for _, tc := range []struct {
		name   string
		remote floodgate.Store
		opts   *lease.Options
		want   error
	}{
		{"nil remote", nil, withAlg(lease.Options{}), floodgate.ErrInvalidConfig},
		{"negative MinBatch", r, withAlg(lease.Options{MinBatch: -1}), lease.ErrInvalidOptions},
		{"negative MaxBatch", r, withAlg(lease.Options{MaxBatch: -1}), lease.ErrInvalidOptions},
		{"MinBatch above MaxBatch", r, withAlg(lease.Options{MinBatch: 11, MaxBatch: 10}), lease.ErrInvalidOptions},
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

// TestNewBatchOptions: MinBatch and MaxBatch that depend on no quota are
// checked by New, and a MinBatch above the default MaxBatch of a quota
// raises that default rather than failing.
func TestNewBatchOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Minute})
		// The default MaxBatch of a quota of 100 is 7; MinBatch 20 is
		// within the quota, so the pools hold 20.
		l := newLease(t, r, &lease.Options{MinBatch: 20})
		_, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		assert.Equal(t, []int64{20}, r.asks())
		assert.EqualValues(t, 19, l.Held("k"))
		require.NoError(t, l.Close())
		// A MinBatch of any size passes New: it is checked against each
		// quota at Bind.
		ls, err := lease.New(r, &lease.Options{MinBatch: 1 << 62})
		require.NoError(t, err)
		require.NoError(t, ls.Close())
	})
}

// TestBindErrors: what New refused of a remote limiter, Bind refuses of
// the algorithm it is given (the remote no longer reports one): a leaky
// bucket, a Limits, an invalid algorithm, and Options a quota cannot
// serve. A bad name, the remote's own refusal and a closed Store fail
// too, through floodgate.New as through Bind.
func TestBindErrors(t *testing.T) {
	fw := floodgate.FixedWindow{Limit: 100, Window: time.Minute}
	tb := floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 100}
	errRemote := errors.New("test: the remote refuses")
	for _, tc := range []struct {
		name    string
		lname   string
		alg     floodgate.Algorithm
		opts    lease.Options
		bindErr error
		want    []error
	}{
		{"leaky bucket", testName, floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 100}, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"Limits", testName, floodgate.Limits{fw, tb}, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"*Limits", testName, &floodgate.Limits{fw, tb}, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"invalid algorithm", testName, floodgate.FixedWindow{}, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"nil algorithm", testName, nil, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"MinBatch above the quota", testName, fw, lease.Options{MinBatch: 101}, nil, []error{lease.ErrInvalidOptions, floodgate.ErrInvalidConfig}},
		{"empty name", "", fw, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"name with a brace", "a{b}", fw, lease.Options{}, nil, []error{floodgate.ErrInvalidConfig}},
		{"the remote refuses", testName, fw, lease.Options{}, errRemote, []error{errRemote}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRemote(t, tc.alg)
			r.bindErr = tc.bindErr
			ls, err := lease.New(r, &tc.opts)
			require.NoError(t, err)
			defer func() { require.NoError(t, ls.Close()) }()
			b, err := ls.Bind(tc.lname, tc.alg)
			assert.Nil(t, b)
			for _, want := range tc.want {
				assert.ErrorIs(t, err, want, "Bind")
			}
			if tc.lname != "" && tc.alg != nil {
				// floodgate.New checks what it can first; what it passes
				// on, Bind refuses.
				lim, err := floodgate.New(ls, tc.alg, &floodgate.Options{Name: tc.lname})
				assert.Nil(t, lim)
				assert.ErrorIs(t, err, tc.want[0], "floodgate.New")
			}
			assert.Empty(t, r.bound(), "nothing was bound at the remote")
		})
	}

	t.Run("closed", func(t *testing.T) {
		r := newRemote(t, fw)
		ls, err := lease.New(r, nil)
		require.NoError(t, err)
		require.NoError(t, ls.Close())
		b, err := ls.Bind(testName, fw)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, floodgate.ErrClosed)
		assert.ErrorIs(t, err, floodgate.ErrUnavailable)
		assert.Empty(t, r.bound())
	})
}

// TestBindBindsTheRemote: the lease binds its remote under the limiter's
// name and algorithm, once per name and algorithm, and decides with the
// algorithm's quota.
func TestBindBindsTheRemote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fw := floodgate.FixedWindow{Limit: 1000, Window: time.Hour}
		r := newRemote(t, fw)
		l := newLease(t, r, &lease.Options{TTL: time.Hour})
		assert.Equal(t, fw.Policy(), l.Policy())
		assert.Equal(t, []bindCall{{name: testName, alg: fw}}, r.bound())
		// A burst grows the batch to the default MaxBatch: the quota over
		// 16, rounded up.
		for range 200 {
			d, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.EqualValues(t, 1000, d.Limit)
		}
		synctest.Wait()
		assert.EqualValues(t, 63, l.Batch("k"))
		assert.LessOrEqual(t, slices.Max(r.asks()), int64(63))

		// A second limiter of the same name and algorithm shares the
		// binding: its pool, and no second Bind at the remote.
		again, err := floodgate.New(l.Store, fw, &floodgate.Options{Name: testName})
		require.NoError(t, err)
		_, err = again.Allow(ctx, "k")
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 1, l.Keys(), "one pool for both limiters")
		s := l.Stats()
		assert.EqualValues(t, 201, s.Local+s.Waited)
		assert.Len(t, r.bound(), 1)
		require.NoError(t, l.Close())
	})
}

// TestNamesDoNotShare: two limiters on one lease Store, of one algorithm
// under different names, keep their pools and their remote state apart,
// and the Store's janitor expires both, giving each pool's units back to
// its own remote state, in events named by each limiter.
func TestNamesDoNotShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		fw := floodgate.FixedWindow{Limit: 100, Window: time.Hour}
		r := newRemote(t, fw)
		rec := &recorder{}
		ls, err := lease.New(r, &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Second, Observer: rec.observer()})
		require.NoError(t, err)
		a, err := floodgate.New(ls, fw, &floodgate.Options{Name: "a"})
		require.NoError(t, err)
		b, err := floodgate.New(ls, fw, &floodgate.Options{Name: "b"})
		require.NoError(t, err)

		for range 3 {
			_, err := a.Allow(ctx, "k")
			require.NoError(t, err)
		}
		_, err = b.Allow(ctx, "k")
		require.NoError(t, err)
		synctest.Wait()
		assert.EqualValues(t, 7, ls.HeldBy("a", "k"))
		assert.EqualValues(t, 9, ls.HeldBy("b", "k"))
		assert.Equal(t, 2, ls.Keys(), "one key per limiter")
		assert.EqualValues(t, 2, r.upTo.Load(), "one lease per limiter")
		assert.Equal(t, lease.Stats{Local: 2, Waited: 2, Leases: 2, Leased: 20}, ls.Stats(), "Stats over both limiters")

		// The janitor expires both pools at their TTL, and each refund
		// goes to its own limiter's state.
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Zero(t, ls.Keys()+int(ls.Held("k")))
		returns := rec.returned()
		slices.SortFunc(returns, func(x, y observe.Return) int { return strings.Compare(x.Name, y.Name) })
		assert.Equal(t, []observe.Return{
			{Name: "a", Key: "k", Units: 7, Granted: 7, Reason: "expired"},
			{Name: "b", Key: "k", Units: 9, Granted: 9, Reason: "expired"},
		}, returns)
		leases := rec.leased()
		slices.SortFunc(leases, func(x, y observe.Lease) int { return strings.Compare(x.Name, y.Name) })
		assert.Equal(t, []observe.Lease{
			{Name: "a", Key: "k", Units: 10, Granted: 10, Waited: 1},
			{Name: "b", Key: "k", Units: 10, Granted: 10, Waited: 1},
		}, leases)
		require.NoError(t, ls.Close())
		assert.EqualValues(t, 100-3, remoteLeftOf(t, r.store, "a", fw, "k", 100), "a's state counts a's 3 units")
		assert.EqualValues(t, 100-1, remoteLeftOf(t, r.store, "b", fw, "k", 100), "b's state counts b's unit")
	})
}

func TestArgumentErrors(t *testing.T) {
	fw := floodgate.FixedWindow{Limit: 100, Window: time.Minute}
	r := newRemote(t, fw)
	l := newLease(t, r, nil)
	defer func() { require.NoError(t, l.Close()) }()
	// The Bound of the limiter's name: what the lease checks itself, not
	// relying on floodgate.Limiter's checks.
	b, err := l.Bind(testName, fw)
	require.NoError(t, err)
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
			_, err = b.Take(ctx, tc.key, tc.n)
			assert.ErrorIs(t, err, tc.want, "Bound.Take")
			for _, req := range []floodgate.Request{
				{N: tc.n},
				{N: tc.n, MaxDelay: time.Second},
			} {
				_, err = b.Apply(ctx, tc.key, req, nil)
				assert.ErrorIs(t, err, tc.want, "Bound.Apply(%+v)", req)
			}
		})
	}
	// The steps the lease forwards are checked too.
	for _, tc := range []struct {
		key  string
		req  floodgate.Request
		want error
	}{
		{"", floodgate.Request{Op: floodgate.OpTakeUpTo, N: 1}, floodgate.ErrEmptyKey},
		{"k", floodgate.Request{Op: floodgate.OpTakeUpTo}, floodgate.ErrInvalidN},
		{"k", floodgate.Request{Op: floodgate.OpSettle}, floodgate.ErrInvalidN},
		{"k", floodgate.Request{Op: 99, N: 1}, floodgate.ErrInvalidConfig},
		{"k", floodgate.Request{Check: true, N: 101}, floodgate.ErrExceedsLimit},
		{long, floodgate.Request{Check: true, N: 1}, floodgate.ErrKeyTooLong},
	} {
		_, err := b.Apply(ctx, tc.key, tc.req, nil)
		assert.ErrorIs(t, err, tc.want, "Bound.Apply(%+v)", tc.req)
	}
	// The fast path checks n too, once the key has a pool.
	_, err = l.Allow(ctx, "k")
	require.NoError(t, err)
	_, err = l.AllowN(ctx, "k", 0)
	assert.ErrorIs(t, err, floodgate.ErrInvalidN)
	_, err = l.AllowN(ctx, "k", 101)
	assert.ErrorIs(t, err, floodgate.ErrExceedsLimit)
	_, err = l.Reserve(ctx, "k", 1, -time.Second)
	assert.ErrorIs(t, err, floodgate.ErrInvalidDelay)
	for _, n := range []int64{0, -1, 101} {
		_, err = b.Take(ctx, "k", n)
		assert.Error(t, err, "Bound.Take(%d) with a pool", n)
		_, err = b.Apply(ctx, "k", floodgate.Request{N: n}, nil)
		assert.Error(t, err, "Bound.Apply(N: %d) with a pool", n)
	}
	_, err = b.Apply(ctx, "k", floodgate.Request{N: 1, MaxDelay: -time.Second}, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidDelay, "Bound.Apply with a pool")
	assert.Zero(t, r.forwarded()+r.checks.Load()+r.refunds.Load(), "no bad argument reaches the remote")
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
		assert.Equal(t, observe.Lease{Name: testName, Key: "k", Units: 10, Granted: 10, Waited: 1}, leases[0])
		assert.Equal(t, observe.Lease{Name: testName, Key: "k", Units: 6, Granted: 6, Local: 5}, leases[1])

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
		assert.ErrorIs(t, err, floodgate.ErrUnavailable, "the Store's own timeout is the remote's failure")
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
		assert.Zero(t, r.takes.Load())
		// More units: the remote decides, for the RetryAfter of n units.
		d, err = l.AllowN(ctx, "k", 2)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, 800*ms, d.RetryAfter)
		assert.EqualValues(t, 1, r.takes.Load())
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
		assert.Zero(t, r.forwarded())

		// The lease took the whole bucket: the remote reserves into debt.
		d, err = l.Reserve(ctx, "k", 1, time.Second)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, 100*ms, d.Delay)
		assert.EqualValues(t, 1, r.reserves.Load())

		// A limiter's Wait reaches the Bound as a reservation too.
		start := time.Now()
		require.NoError(t, l.Wait(ctx, "k", 1))
		assert.Equal(t, 200*ms, time.Since(start), "Wait slept through the remote's delay")
		assert.EqualValues(t, 2, r.reserves.Load())

		// A Wait whose caller gives up during its sleep gives its units
		// back through the lease to the remote that reserved them: the
		// next reservation waits 50 ms, not 150.
		waiting, stop := context.WithCancel(ctx)
		go func() {
			time.Sleep(50 * ms)
			stop()
		}()
		assert.ErrorIs(t, l.Wait(waiting, "k", 1), context.Canceled)
		assert.EqualValues(t, 3, r.reserves.Load())
		assert.EqualValues(t, 1, r.refunds.Load())
		assert.EqualValues(t, 1, r.refunded.Load())
		d, err = l.Reserve(ctx, "k", 1, time.Second)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, 50*ms, d.Delay)
		assert.EqualValues(t, 4, r.reserves.Load())

		// A caller that gave up takes nothing, even from a pool.
		done, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, l.Wait(done, "k", 1), context.Canceled)

		// Reserve with no delay allowed is AllowN: the refill's denial is
		// the decision.
		time.Sleep(50 * ms)
		d, err = l.Reserve(ctx, "k", 1, 0)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Zero(t, r.takes.Load()+r.applies.Load())
		assert.EqualValues(t, 4, r.reserves.Load())
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
		assert.EqualValues(t, 1, r.takes.Load())
		assert.Zero(t, r.upTo.Load())
		assert.Equal(t, lease.Stats{Forwarded: 1}, l.Stats())
		require.NoError(t, l.Close())
		assert.EqualValues(t, 989, remoteLeft(t, r, "k", 1000))
	})
}

// TestCheckGoesToTheRemote: a check-only step reports the remote's state
// and consumes nothing: no pool unit, no remote unit.
func TestCheckGoesToTheRemote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Hour})
		l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10})
		_, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		before := l.Stats()
		// The remote's count: 90 left after the lease of 10.
		for _, tc := range []struct {
			req                floodgate.Request
			granted, remaining int64
		}{
			{floodgate.Request{Check: true, N: 1}, 1, 89},
			{floodgate.Request{Check: true, N: 5, MaxDelay: time.Second}, 5, 85},
			{floodgate.Request{Op: floodgate.OpTakeUpTo, Check: true, N: 100}, 90, 0},
		} {
			res, err := l.Apply(ctx, "k", tc.req, nil)
			require.NoError(t, err)
			assert.True(t, res.Allowed, "Apply(%+v)", tc.req)
			assert.Equal(t, tc.granted, res.Granted, "Apply(%+v)", tc.req)
			assert.Equal(t, tc.remaining, res.Remaining, "Apply(%+v)", tc.req)
		}
		assert.EqualValues(t, 3, r.checks.Load())
		assert.EqualValues(t, 9, l.Held("k"), "the pool is untouched")
		assert.Equal(t, before, l.Stats())
		require.NoError(t, l.Close())
		assert.EqualValues(t, 99, remoteLeft(t, r, "k", 100))
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
			assert.Equal(t, observe.Return{Name: testName, Key: e.Key, Units: 7, Granted: 7, Reason: "closed"}, e)
		}
		_, err := l.Allow(ctx, "a")
		assert.ErrorIs(t, err, floodgate.ErrClosed)
		_, err = l.Allow(ctx, "new")
		assert.ErrorIs(t, err, floodgate.ErrClosed)
		assert.ErrorIs(t, l.Wait(ctx, "a", 1), floodgate.ErrClosed)
		// Every step fails, forwarded ones included, without reaching
		// the remote.
		refunds := r.refunds.Load()
		for _, req := range []floodgate.Request{
			{N: 1},
			{N: 1, MaxDelay: time.Second},
			{Op: floodgate.OpTakeUpTo, N: 1},
			{Op: floodgate.OpSettle, N: -1, At: time.Now()},
			{Check: true, N: 1},
		} {
			_, err := l.Apply(ctx, "a", req, nil)
			assert.ErrorIs(t, err, floodgate.ErrClosed, "Apply(%+v)", req)
			assert.ErrorIs(t, err, floodgate.ErrUnavailable, "Apply(%+v)", req)
		}
		assert.Zero(t, r.forwarded()+r.checks.Load())
		assert.Equal(t, refunds, r.refunds.Load())
		assert.Equal(t, int64(3*7), l.Stats().Returned)
	})
}

// TestClosedStepsFail: for each algorithm a lease binds, decisions racing
// Close decide or fail, and once Close has returned every step fails with
// an error matching floodgate.ErrUnavailable and floodgate.ErrClosed,
// whatever the route: a pool's take, a forwarded reservation or check, a
// take up to n or a settlement.
func TestClosedStepsFail(t *testing.T) {
	for _, alg := range boundAlgorithms {
		t.Run(algName(alg), func(t *testing.T) {
			ctx := context.Background()
			r := newRemote(t, alg)
			l := newLease(t, r, &lease.Options{MinBatch: 5, MaxBatch: 5})
			b, err := l.Bind(testName, alg)
			require.NoError(t, err)
			var closed atomic.Bool
			var after atomic.Int64
			var wg sync.WaitGroup
			for g := range 8 {
				key := []string{"a", "b"}[g%2]
				wg.Go(func() {
					for {
						done := closed.Load()
						var err error
						if g < 4 {
							_, err = l.Allow(ctx, key)
						} else {
							_, err = l.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: 1}, nil)
						}
						if err != nil {
							assert.ErrorIs(t, err, floodgate.ErrClosed)
							return
						}
						if done {
							after.Add(1)
							return
						}
					}
				})
			}
			time.Sleep(time.Millisecond)
			require.NoError(t, l.Close())
			closed.Store(true)
			wg.Wait()
			assert.Zero(t, after.Load(), "decisions made after Close returned")
			at := time.Now()
			for _, req := range []floodgate.Request{
				{N: 1},
				{N: 1, MaxDelay: time.Second},
				{Op: floodgate.OpTakeUpTo, N: 1},
				{Op: floodgate.OpSettle, N: -1, At: at},
				{Op: floodgate.OpSettle, N: 1, At: at},
				{Check: true, N: 1},
			} {
				for _, key := range []string{"a", "new"} {
					_, err := l.Apply(ctx, key, req, nil)
					assert.ErrorIs(t, err, floodgate.ErrClosed, "Limiter.Apply(%q, %+v)", key, req)
					assert.ErrorIs(t, err, floodgate.ErrUnavailable, "Limiter.Apply(%q, %+v)", key, req)
					_, err = b.Apply(ctx, key, req, nil)
					assert.ErrorIs(t, err, floodgate.ErrClosed, "Bound.Apply(%q, %+v)", key, req)
				}
			}
			for _, key := range []string{"a", "new"} {
				_, err := b.Take(ctx, key, 1)
				assert.ErrorIs(t, err, floodgate.ErrClosed, "Bound.Take(%q)", key)
				assert.ErrorIs(t, l.Wait(ctx, key, 1), floodgate.ErrClosed, "Wait(%q)", key)
			}
			_, err = floodgate.New(l.Store, alg, &floodgate.Options{Name: "later"})
			assert.ErrorIs(t, err, floodgate.ErrClosed, "a limiter bound after Close")
		})
	}
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
		// or found the Store closed; every other unit went back.
		err := <-errc
		want := int64(1000)
		if err == nil {
			want--
		} else {
			assert.ErrorIs(t, err, floodgate.ErrClosed)
		}
		assert.Equal(t, want, remoteLeft(t, r, "k", 1000))
	})
}

// TestObserverMayCallTheStore: observers run under no lock of the
// Store's, so they may call it and its limiters, the per-key lock included
// (Batch).
func TestObserverMayCallTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
		var l leased
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
		assert.Equal(t, observe.Return{Name: testName, Key: "k", Units: 9, Reason: "closed"}, returns[0])
	})
}

func TestClockBackwards(t *testing.T) {
	clock := floodgatetest.NewClock(time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC))
	store, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	r := wrap(store, floodgate.FixedWindow{Limit: 1000, Window: time.Hour})
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

// TestRefillsAskUndoLate: every lease round trip asks the remote to give
// back what it took if the refill failed for the lease (a timeout) and
// was made all the same (floodgate.Request.UndoLate): the lease installs
// nothing from a failed refill, so such units would be lost to everyone.
func TestRefillsAskUndoLate(t *testing.T) {
	r := newRemote(t, floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 1000})
	l := newLease(t, r, nil)
	for range 200 {
		_, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	require.Positive(t, r.upTo.Load())
	require.Equal(t, r.upTo.Load(), r.undoLate.Load(), "lease round trips without UndoLate")
}
