package adaptive

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// ctxKey marks the context of an Acquire, to check that OnReject gets it.
type ctxKey struct{}

// TestObserverRejectCounts: every rejected Acquire, at once or after a
// wait (MaxWait, the context, a full backlog), is one OnReject with the
// Limiter's name, the request's partition and the Acquire's context; the
// events add up to Stats.Rejected. Admissions report nothing.
func TestObserverRejectCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			got  []observe.Reject
			ctxs []context.Context
		)
		l := newLimiter(t, fixed(t, 2), &LimiterOptions{
			Name: "search", Wait: WaitFIFO, MaxWait: time.Second, MaxWaiters: 1,
			Criticality: &CriticalityOptions{},
			Observer: &observe.Observer{OnReject: func(ctx context.Context, r observe.Reject) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, r)
				ctxs = append(ctxs, ctx)
			}},
		})
		ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
		a, err := l.AcquirePartition(ctx, ClassCritical)
		require.NoError(t, err)
		b, err := l.AcquirePartition(ctx, ClassCritical)
		require.NoError(t, err)
		require.Empty(t, got, "admissions report nothing")

		// MaxWait: one waiter at a time, 1s each.
		const n = 5
		for range n {
			_, err := l.AcquirePartition(ctx, ClassSheddable)
			require.ErrorIs(t, err, ErrLimitExceeded)
		}
		// A waiter fills the backlog; the next request is rejected at once;
		// then the waiter's context ends.
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := l.AcquirePartition(wctx, ClassDefault)
			errc <- err
		}()
		synctest.Wait()
		_, err = l.AcquirePartition(ctx, ClassBackground)
		require.ErrorIs(t, err, ErrLimitExceeded)
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		a.Success()
		b.Success()

		want := []observe.Reject{}
		for range n {
			want = append(want, observe.Reject{Name: "search", Partition: ClassSheddable, Limit: 2, InFlight: 2, Reason: "timeout"})
		}
		want = append(want,
			observe.Reject{Name: "search", Partition: ClassBackground, Limit: 2, InFlight: 2, Reason: "queue"},
			observe.Reject{Name: "search", Partition: ClassDefault, Limit: 2, InFlight: 2, Reason: "canceled"})
		assert.Equal(t, want, got)
		assert.EqualValues(t, len(got), l.Stats().Rejected)
		for i, c := range ctxs {
			assert.Equal(t, "caller", c.Value(ctxKey{}), "event %d: the Acquire's context", i)
		}
	})
}

// TestObserverLimitChanges: every change of the enforced limit is one
// OnLimitChange, in order on one goroutine, with the limit before and
// after and context.Background(); a Limit that answers its current limit
// reports nothing.
func TestObserverLimitChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	script := make([]int, 500)
	for i := range script {
		script[i] = rng.IntN(6) // 0 is enforced as 1
	}
	var changes []observe.LimitChange
	var bg atomic.Bool
	bg.Store(true)
	rec := &recorder{limit: 3, script: script}
	l := newLimiter(t, rec, &LimiterOptions{Observer: &observe.Observer{OnLimitChange: func(ctx context.Context, c observe.LimitChange) {
		changes = append(changes, c)
		if ctx != context.Background() {
			bg.Store(false)
		}
	}}})
	want := 0
	limit := l.Limit()
	for range script {
		tok, err := l.Acquire(context.Background())
		require.NoError(t, err)
		tok.Success()
		if next := l.Limit(); next != limit {
			want++
			limit = next
		}
	}
	require.Len(t, changes, want)
	prev := 3
	for i, c := range changes {
		assert.Equal(t, "adaptive", c.Name)
		assert.Equal(t, prev, c.Old, "change %d starts where the last ended", i)
		assert.NotEqual(t, c.Old, c.New, "change %d", i)
		assert.Zero(t, c.InFlight)
		prev = c.New
	}
	assert.Equal(t, l.Limit(), prev)
	assert.True(t, bg.Load(), "limit changes carry context.Background()")
}

// TestObserverMayCallTheLimiter: observers run after the Limiter's mutex
// is released, from many goroutines at once: one that calls back into it
// does not deadlock.
func TestObserverMayCallTheLimiter(t *testing.T) {
	var l *Limiter
	var rejects, changes atomic.Int64
	v, err := NewAIMD(&AIMDOptions{InitialLimit: 4, MinLimit: 1, MaxLimit: 8})
	require.NoError(t, err)
	l = newLimiter(t, v, &LimiterOptions{Observer: &observe.Observer{
		OnReject: func(ctx context.Context, _ observe.Reject) {
			_ = l.Stats()
			_ = l.Utilization()
			if rejects.Add(1)%16 == 0 {
				// An Acquire from an observer: it may be rejected and
				// report again, on this goroutine.
				if tok, err := l.Acquire(ctx); err == nil {
					tok.Ignore()
				}
			}
		},
		OnLimitChange: func(context.Context, observe.LimitChange) {
			changes.Add(1)
			_ = l.Stats()
			_ = l.Limit()
		},
	}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tok, err := l.Acquire(context.Background())
				if err != nil {
					continue
				}
				if (g+i)%7 == 0 {
					tok.Dropped()
				} else {
					tok.Success()
				}
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, l.Stats().Rejected, rejects.Load())
	assert.Positive(t, changes.Load())
}

// TestObserverNone: a Limiter without an Observer, or with one of other
// components' events, works the same and reports nothing.
func TestObserverNone(t *testing.T) {
	var other atomic.Int64
	for _, o := range []*observe.Observer{nil, {}, {OnShed: func(context.Context, observe.Shed) { other.Add(1) }}} {
		rec := &recorder{limit: 1, script: []int{2, 1}}
		l := newLimiter(t, rec, &LimiterOptions{Observer: o})
		a := mustAcquire(t, l, "")
		mustReject(t, l, "")
		a.Success()
		b := mustAcquire(t, l, "")
		b.Success()
		assert.Equal(t, 1, l.Limit())
		assert.EqualValues(t, 1, l.Stats().Rejected)
	}
	assert.Zero(t, other.Load())
}

func TestObserverInvalid(t *testing.T) {
	for _, o := range []*observe.Observer{{LatencyEvery: -1}, {FailureInterval: -time.Second}} {
		l, err := NewLimiter(fixed(t, 1), &LimiterOptions{Observer: o})
		assert.Nil(t, l)
		assert.ErrorIs(t, err, ErrInvalidOption)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
}

// TestObserverAllocs: with both observer functions set, admissions,
// rejections and limit changes allocate nothing.
func TestObserverAllocs(t *testing.T) {
	var rejects, changes atomic.Int64
	script := make([]int, 0, 8192)
	for i := range cap(script) {
		script = append(script, 2-i%2) // 2, 1, 2, ...: a change at every sample
	}
	rec := &recorder{limit: 1, script: script}
	l := newLimiter(t, rec, &LimiterOptions{
		Observer: &observe.Observer{
			OnReject:      func(context.Context, observe.Reject) { rejects.Add(1) },
			OnLimitChange: func(context.Context, observe.LimitChange) { changes.Add(1) },
		},
	})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		tok, err := l.Acquire(ctx)
		if err != nil {
			panic(err)
		}
		if tok2, err := l.Acquire(ctx); err == nil { // rejected at limit 1
			tok2.Ignore() // no sample
		}
		tok.Success() // a change of the limit
		rec.samples = rec.samples[:0]
	})
	assert.Zero(t, allocs, "allocations per Acquire, rejection and Success")
	assert.EqualValues(t, 501, rejects.Load(), "one run in two, and the warm-up run")
	assert.EqualValues(t, 1001, changes.Load())
}
