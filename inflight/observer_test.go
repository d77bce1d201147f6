package inflight_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/observe"
)

// events keeps the events of the Observer it makes.
type events struct {
	mu       sync.Mutex
	acquires []observe.Acquire
	releases []observe.Release
	ctxs     []context.Context
}

func (r *events) observer() *observe.Observer {
	return &observe.Observer{
		OnAcquire: func(ctx context.Context, e observe.Acquire) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.acquires = append(r.acquires, e)
			r.ctxs = append(r.ctxs, ctx)
		},
		OnRelease: func(ctx context.Context, e observe.Release) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.releases = append(r.releases, e)
			r.ctxs = append(r.ctxs, ctx)
		},
	}
}

// ctxKey marks the contexts of the calls, to check that events carry
// them.
type ctxKey struct{}

// failingRelease is a Store whose Releases fail.
type failingRelease struct{ inflight.Store }

func (failingRelease) Release(context.Context, string, string, inflight.Hold) error { return errDown }

// TestObserverAcquire: every Acquire is one OnAcquire with the Limiter's
// name, the key, its outcome, the limit and the requests in flight, and
// the Acquire's context: admissions, denials and each kind of failure.
func TestObserverAcquire(t *testing.T) {
	s := inflight.NewLocalStore()
	var rec events
	l := newLimiter(t, s, 2, &inflight.Options{Name: "uploads", Observer: rec.observer()})
	ctx := context.WithValue(context.Background(), ctxKey{}, "acquire")
	a, err := l.Acquire(ctx, "k")
	require.NoError(t, err)
	b, err := l.Acquire(ctx, "k")
	require.NoError(t, err)
	c, err := l.Acquire(ctx, "k")
	require.NoError(t, err)
	require.False(t, c.Allowed)
	_, err = l.Acquire(ctx, "")
	require.ErrorIs(t, err, floodgate.ErrEmptyKey)
	_, err = l.Acquire(ctx, strings.Repeat("x", floodgate.MaxKeyLen+1))
	require.ErrorIs(t, err, floodgate.ErrKeyTooLong)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Acquire(done, "k")
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, a.Release(ctx))
	require.NoError(t, b.Release(ctx))
	require.NoError(t, l.Close())
	_, err = l.Acquire(ctx, "k")
	require.ErrorIs(t, err, floodgate.ErrClosed)

	outcomes := []observe.Outcome{observe.Allowed, observe.Allowed, observe.Denied, observe.Failed, observe.Failed, observe.Failed, observe.Failed}
	inFlight := []int64{1, 2, 2, 0, 0, 0, 0}
	errs := []error{nil, nil, nil, floodgate.ErrEmptyKey, floodgate.ErrKeyTooLong, context.Canceled, floodgate.ErrClosed}
	require.Len(t, rec.acquires, len(outcomes))
	for i, e := range rec.acquires {
		assert.Equal(t, "uploads", e.Name, "event %d", i)
		assert.Equal(t, outcomes[i], e.Outcome, "event %d", i)
		assert.Equal(t, int64(2), e.Limit, "event %d", i)
		assert.Equal(t, inFlight[i], e.InFlight, "event %d", i)
		if errs[i] == nil {
			assert.NoError(t, e.Err, "event %d", i)
		} else {
			assert.ErrorIs(t, e.Err, errs[i], "event %d", i)
		}
	}
	assert.Equal(t, "k", rec.acquires[0].Key)
	assert.Len(t, rec.releases, 2)
	for i, c := range rec.ctxs {
		assert.NotNil(t, c.Value(ctxKey{}), "event %d carries the call's context", i)
	}
}

// TestObserverStoreError: an Acquire the store fails is Failed with the
// store's error; a Release it fails is reported with its error.
func TestObserverStoreError(t *testing.T) {
	f := newFake()
	var rec events
	l := newLimiter(t, failingRelease{f}, 1, &inflight.Options{Observer: rec.observer()})
	slot, err := l.Acquire(context.Background(), "k")
	require.NoError(t, err)
	require.ErrorIs(t, slot.Release(context.Background()), errDown)
	require.Len(t, rec.releases, 1)
	assert.Equal(t, "inflight:1", rec.releases[0].Name, "the default name")
	assert.ErrorIs(t, rec.releases[0].Err, errDown)

	l = newLimiter(t, failing{}, 1, &inflight.Options{Observer: rec.observer()})
	_, err = l.Acquire(context.Background(), "k")
	require.ErrorIs(t, err, floodgate.ErrUnavailable)
	last := rec.acquires[len(rec.acquires)-1]
	assert.Equal(t, observe.Failed, last.Outcome)
	assert.ErrorIs(t, last.Err, floodgate.ErrUnavailable)
}

// TestObserverRelease: each admitted slot is released once, however many
// of its copies are released, with how long it was held on the (virtual)
// monotonic clock and the Release's context; on a LocalStore, on a store whose
// holds expire (renewed meanwhile), and for a hold a renewal found lost.
func TestObserverRelease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) inflight.Store
	}{
		{"local", func(*testing.T) inflight.Store { return inflight.NewLocalStore() }},
		{"expiring", func(*testing.T) inflight.Store { return newFake() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec events
				l := newLimiter(t, tc.store(t), 10, &inflight.Options{TTL: time.Second, Observer: rec.observer()})
				ctx := context.WithValue(context.Background(), ctxKey{}, "release")
				a, err := l.Acquire(context.Background(), "k")
				require.NoError(t, err)
				time.Sleep(1500 * time.Millisecond) // a renewal for the expiring store
				b, err := l.Acquire(context.Background(), "k")
				require.NoError(t, err)
				time.Sleep(time.Second)
				copyA := a
				var wg sync.WaitGroup
				for _, s := range []inflight.Slot{a, copyA, a, b, b} {
					wg.Go(func() { assert.NoError(t, s.Release(ctx)) })
				}
				wg.Wait()
				require.NoError(t, a.Release(ctx))
				require.Len(t, rec.releases, 2, "one event per slot")
				held := map[time.Duration]int{}
				for i, e := range rec.releases {
					assert.Equal(t, "k", e.Key)
					assert.NoError(t, e.Err)
					held[e.Held]++
					assert.Equal(t, "release", rec.ctxs[len(rec.ctxs)-1-i].Value(ctxKey{}))
				}
				assert.Equal(t, map[time.Duration]int{2500 * time.Millisecond: 1, time.Second: 1}, held)
			})
		})
	}
	t.Run("lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake()
			var rec events
			l := newLimiter(t, f, 2, &inflight.Options{TTL: time.Second, Observer: rec.observer()})
			slot, err := l.Acquire(context.Background(), "k")
			require.NoError(t, err)
			f.lose.Store(true)
			time.Sleep(2 * time.Second)
			require.NoError(t, slot.Release(context.Background()))
			require.NoError(t, slot.Release(context.Background()))
			require.Zero(t, f.releases.Load(), "nothing left to free")
			require.Len(t, rec.releases, 1, "the request ended all the same")
			assert.Equal(t, observe.Release{Name: "inflight:2", Key: "k", Held: 2 * time.Second}, rec.releases[0])
		})
	})
}

// TestObserverCounts: from many goroutines, with copies of slots released
// twice, there is one OnAcquire per Acquire, the outcomes add up to the
// decisions the callers saw, and one OnRelease per admitted slot.
func TestObserverCounts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) inflight.Store
	}{
		{"local", func(*testing.T) inflight.Store { return inflight.NewLocalStore() }},
		{"expiring", func(*testing.T) inflight.Store { return newFake() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var outcomes [4]atomic.Int64
			var released atomic.Int64
			l := newLimiter(t, tc.store(t), 4, &inflight.Options{Observer: &observe.Observer{
				OnAcquire: func(_ context.Context, e observe.Acquire) { outcomes[e.Outcome].Add(1) },
				OnRelease: func(context.Context, observe.Release) { released.Add(1) },
			}})
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					ctx := context.Background()
					for i := range 300 {
						s, err := l.Acquire(ctx, []string{"a", "b"}[(g+i)%2])
						if !assert.NoError(t, err) {
							return
						}
						if !s.Allowed {
							denied.Add(1)
							continue
						}
						allowed.Add(1)
						c := s
						assert.NoError(t, s.Release(ctx))
						assert.NoError(t, c.Release(ctx))
					}
				})
			}
			wg.Wait()
			assert.Equal(t, allowed.Load(), outcomes[observe.Allowed].Load())
			assert.Equal(t, denied.Load(), outcomes[observe.Denied].Load())
			assert.Zero(t, outcomes[observe.Failed].Load())
			assert.Equal(t, allowed.Load(), released.Load())
		})
	}
}

// TestObserverMayCallTheLimiter: observers run under no lock of the
// Limiter's (its renewer's included): one that acquires and releases
// slots itself does not deadlock.
func TestObserverMayCallTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l *inflight.Limiter
		var nested atomic.Int64
		inner := func(ctx context.Context) {
			if nested.Add(1) > 4 {
				return
			}
			s, err := l.Acquire(ctx, "inner")
			if assert.NoError(t, err) {
				assert.NoError(t, s.Release(ctx))
			}
		}
		l = newLimiter(t, newFake(), 2, &inflight.Options{TTL: time.Second, Observer: &observe.Observer{
			OnAcquire: func(ctx context.Context, e observe.Acquire) {
				if e.Key == "outer" {
					inner(ctx)
				}
			},
			OnRelease: func(ctx context.Context, e observe.Release) {
				if e.Key == "outer" {
					inner(ctx)
				}
			},
		}})
		s, err := l.Acquire(context.Background(), "outer")
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond) // renewals run meanwhile
		require.NoError(t, s.Release(context.Background()))
		assert.EqualValues(t, 2, nested.Load())
	})
}

// TestObserverNone: without an Observer, or with one of other components'
// events, the Limiter works the same and reports nothing.
func TestObserverNone(t *testing.T) {
	var other atomic.Int64
	for _, o := range []*observe.Observer{nil, {}, {OnShed: func(context.Context, observe.Shed) { other.Add(1) }}} {
		l := newLimiter(t, inflight.NewLocalStore(), 1, &inflight.Options{Observer: o})
		s, err := l.Acquire(context.Background(), "k")
		require.NoError(t, err)
		d, err := l.Acquire(context.Background(), "k")
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		require.NoError(t, s.Release(context.Background()))
		require.NoError(t, s.Release(context.Background()))
		s, err = l.Acquire(context.Background(), "k")
		require.NoError(t, err)
		assert.True(t, s.Allowed, "released once")
		require.NoError(t, s.Release(context.Background()))
	}
	assert.Zero(t, other.Load())
}

func TestObserverInvalid(t *testing.T) {
	for _, o := range []*observe.Observer{{LatencyEvery: -1}, {FailureInterval: -time.Second}} {
		l, err := inflight.New(newFake(), 1, &inflight.Options{Observer: o})
		assert.Nil(t, l)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
}

// TestAllocations: on a LocalStore, an Acquire and its Release allocate
// nothing for a key in use, observed or not, a denial and a second
// Release included.
func TestAllocations(t *testing.T) {
	var n atomic.Int64
	for _, o := range []*observe.Observer{nil, {
		OnAcquire: func(context.Context, observe.Acquire) { n.Add(1) },
		OnRelease: func(context.Context, observe.Release) { n.Add(1) },
	}} {
		l := newLimiter(t, inflight.NewLocalStore(), 1, &inflight.Options{Observer: o})
		ctx := context.Background()
		held, err := l.Acquire(ctx, "busy")
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(1000, func() {
			s, err := l.Acquire(ctx, "k")
			if err != nil || !s.Allowed {
				panic(err)
			}
			_, _ = l.Acquire(ctx, "busy") // denied
			_ = s.Release(ctx)
			_ = s.Release(ctx)
		})
		require.NoError(t, held.Release(ctx))
		assert.Zero(t, allocs, "observed: %v", o != nil)
	}
	assert.EqualValues(t, 3*1001+2, n.Load(), "two acquisitions and a release per run, and the held slot's")
}
