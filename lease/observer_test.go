package lease_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// TestObserverReplacedAndNamed: a lease counted in a later window of the
// remote than the pool's (here the remote's clock jumps a window ahead)
// replaces the pool, whose units are returned as "replaced"; every event
// carries the limiter's name.
func TestObserverReplacedAndNamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var skew atomic.Int64
		store, err := memstore.New(&memstore.Options{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
		require.NoError(t, err)
		r := wrap(store, floodgate.FixedWindow{Limit: 100, Window: time.Second})
		rec := &recorder{}
		l := newNamed(t, r, "edge", &lease.Options{MinBatch: 10, MaxBatch: 10, TTL: time.Hour, Observer: rec.observer()})

		time.Sleep(100 * ms)
		// The gate holds the first round trip until its caller waits for
		// it, so that the lease counts its waiter.
		r.gate = make(chan struct{})
		first := make(chan struct{})
		go func() {
			defer close(first)
			assert.Equal(t, 3, allowAll(t, l, "k", 3)) // a lease of 10 in window 0; 7 left
		}()
		synctest.Wait()
		close(r.gate)
		<-first
		synctest.Wait() // the lease's event is reported after its waiter wakes
		skew.Store(int64(time.Second))
		require.Equal(t, 3, allowAll(t, l, "k", 3)) // 4 left, below LowWater: a refill of 6, in window 1
		synctest.Wait()
		require.NoError(t, l.Close())

		assert.Equal(t, []observe.Lease{
			{Name: "edge", Key: "k", Units: 10, Granted: 10, Waited: 1},
			{Name: "edge", Key: "k", Units: 6, Granted: 6, Local: 5},
		}, rec.leased())
		assert.Equal(t, []observe.Return{
			// The remote's window 0 has ended: nothing to give back.
			{Name: "edge", Key: "k", Units: 4, Reason: "replaced"},
			{Name: "edge", Key: "k", Units: 6, Granted: 6, Reason: "closed"},
		}, rec.returned())
		assert.True(t, rec.background(), "events of the Store's own round trips carry context.Background()")
	})
}

// TestObserverFailedLease: a failed round trip is reported with the error
// the waiting caller got.
func TestObserverFailedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRemote(t, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 100})
		r.setFail(errDown)
		r.gate = make(chan struct{})
		rec := &recorder{}
		l := newLease(t, r, &lease.Options{MinBatch: 5, MaxBatch: 5, Observer: rec.observer()})
		errc := make(chan error, 1)
		go func() {
			_, err := l.Allow(context.Background(), "k")
			errc <- err
		}()
		synctest.Wait()
		close(r.gate)
		require.ErrorIs(t, <-errc, floodgate.ErrUnavailable)
		synctest.Wait()
		leases := rec.leased()
		require.Len(t, leases, 1)
		assert.ErrorIs(t, leases[0].Err, errDown)
		leases[0].Err = nil
		assert.Equal(t, observe.Lease{Name: testName, Key: "k", Units: 5, Waited: 1}, leases[0])
		require.NoError(t, l.Close())
		assert.Empty(t, rec.returned(), "nothing was leased, nothing is returned")
	})
}

// TestObserverCounts: over random traffic on several keys, the events add
// up to the Store's Stats and to what the remote saw: one OnLease per
// round trip with the units it granted, one OnReturn per pool given up
// with the units the remote took back, and every leased unit either
// admitted or returned.
func TestObserverCounts(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 500, Per: time.Second, Burst: 200},
		floodgate.FixedWindow{Limit: 300, Window: time.Second},
		floodgate.SlidingWindow{Limit: 300, Window: time.Second},
		floodgate.SlidingLog{Limit: 300, Window: time.Second},
	} {
		t.Run(algName(alg), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRemote(t, alg)
				rec := &recorder{}
				l := newLease(t, r, &lease.Options{MaxBatch: 20, TTL: 300 * ms, Observer: rec.observer()})
				rng := rand.New(rand.NewPCG(1, 2))
				keys := []string{"a", "b", "c"}
				admitted := int64(0) // units
				for range 2000 {
					time.Sleep(time.Duration(rng.IntN(3)) * ms)
					n := 1 + rng.Int64N(3)
					d, err := l.AllowN(context.Background(), keys[rng.IntN(len(keys))], n)
					require.NoError(t, err)
					if d.Allowed {
						admitted += n
					}
				}
				synctest.Wait()
				require.NoError(t, l.Close())

				s := l.Stats()
				leases, returns := rec.leased(), rec.returned()
				var granted, given, back int64
				for _, e := range leases {
					require.Equal(t, testName, e.Name)
					require.NoError(t, e.Err)
					granted += e.Granted
				}
				for _, e := range returns {
					require.Contains(t, []string{"expired", "replaced", "closed"}, e.Reason)
					given += e.Units
					back += e.Granted
				}
				assert.EqualValues(t, s.Leases, len(leases), "one OnLease per round trip")
				assert.EqualValues(t, r.upTo.Load(), len(leases))
				assert.Equal(t, s.Leased, granted)
				assert.Equal(t, r.granted.Load(), granted)
				assert.Equal(t, s.Returned, back)
				assert.Equal(t, r.refunded.Load(), back)
				// Every leased unit was admitted or returned; the
				// admissions beyond them were forwarded decisions (of at
				// most 3 units each), which the remote decided directly.
				fromPools := granted - given
				assert.LessOrEqual(t, fromPools, admitted)
				assert.LessOrEqual(t, admitted-fromPools, 3*s.Forwarded)
				assert.Positive(t, s.Local)
				assert.True(t, rec.background())
			})
		})
	}
}

// TestObserverNone: without an Observer, or with one of other events, the
// Store works the same and reports nothing.
func TestObserverNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var decisions atomic.Int64
		for _, o := range []*observe.Observer{nil, {}, {OnDecision: func(context.Context, observe.DecisionEvent) { decisions.Add(1) }}} {
			r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Second})
			l := newLease(t, r, &lease.Options{MinBatch: 10, MaxBatch: 10, Observer: o})
			require.Equal(t, 20, allowAll(t, l, "k", 20))
			synctest.Wait()
			require.NoError(t, l.Close())
			assert.EqualValues(t, 20, 100-remoteLeft(t, r, "k", 100))
		}
		assert.Zero(t, decisions.Load(), "a lease Store reports no decision: observe.Store does")
	})
}

func TestObserverInvalid(t *testing.T) {
	r := newRemote(t, floodgate.FixedWindow{Limit: 100, Window: time.Second})
	for _, o := range []*observe.Observer{{LatencyEvery: -1}, {FailureInterval: -time.Second}} {
		l, err := lease.New(r, &lease.Options{Observer: o})
		assert.Nil(t, l)
		assert.ErrorIs(t, err, lease.ErrInvalidOptions)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
}

// TestObserverWaitedAddsUp has many goroutines drain small pools, so
// that callers keep joining refills in flight: the events' Waited must
// add up to Stats.Waited, the callers that waited for a round trip, even
// for a caller that joined a refill just as it landed.
func TestObserverWaitedAddsUp(t *testing.T) {
	store, err := memstore.New(nil)
	require.NoError(t, err)
	r := wrap(store, floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40})
	rec := &recorder{}
	l := newLease(t, r, &lease.Options{MinBatch: 1, MaxBatch: 2, Observer: rec.observer()})
	const goroutines, each = 16, 3000
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				_, err := l.Allow(context.Background(), []string{"a", "b"}[(g+i)%2])
				assert.NoError(t, err)
			}
		}()
	}
	for range goroutines {
		<-done
	}
	require.NoError(t, l.Close())
	var waited int64
	for _, e := range rec.leased() {
		waited += e.Waited
	}
	s := l.Stats()
	require.Positive(t, s.Waited)
	assert.Equal(t, s.Waited, waited, "Waited of the events against Stats.Waited (%+v)", s)
}
