package adaptive

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/observe"
)

// waitOrder queues three requests behind a held slot, one at a time, then
// frees slots one by one and returns the order in which they were admitted.
func waitOrder(t *testing.T, mode WaitMode) []string {
	t.Helper()
	var order []string
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, fixed(t, 1), &LimiterOptions{Wait: mode, MaxWait: time.Hour})
		hold := mustAcquire(t, l, "")
		admitted := make(chan string)
		release := make(chan struct{})
		for _, name := range []string{"first", "second", "third"} {
			go func() {
				tok, err := l.Acquire(context.Background())
				if err != nil {
					t.Errorf("Acquire(%s): %v", name, err)
					return
				}
				admitted <- name
				<-release
				tok.Success()
			}()
			synctest.Wait() // queued before the next one starts
		}
		assert.Equal(t, 3, l.Stats().Waiting)
		hold.Success()
		for range 3 {
			order = append(order, <-admitted)
			release <- struct{}{}
		}
		synctest.Wait()
		assert.Equal(t, Stats{Limit: 1, Succeeded: 4}, l.Stats())
	})
	return order
}

func TestWaitOrder(t *testing.T) {
	assert.Equal(t, []string{"first", "second", "third"}, waitOrder(t, WaitFIFO))
	assert.Equal(t, []string{"third", "second", "first"}, waitOrder(t, WaitLIFO))
}

func TestWaitSampleExcludesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{limit: 1}
		l := newLimiter(t, rec, &LimiterOptions{Wait: WaitFIFO, MaxWait: time.Minute})
		hold := mustAcquire(t, l, "")
		done := make(chan struct{})
		go func() {
			defer close(done)
			tok, err := l.Acquire(context.Background())
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			time.Sleep(time.Second)
			tok.Success()
		}()
		time.Sleep(5 * time.Second)
		hold.Success()
		<-done
		require.Len(t, rec.samples, 2)
		assert.Equal(t, 5*time.Second, rec.samples[0].RTT, "held slot")
		assert.Equal(t, time.Second, rec.samples[1].RTT, "waiter's RTT starts when it is admitted")
		assert.Equal(t, rec.samples[0].Start.Add(5*time.Second), rec.samples[1].Start)
	})
}

func TestWaitGivesUp(t *testing.T) {
	// Three ways out of the backlog, in one bubble (t.Run is not allowed in
	// one): MaxWait, the context's deadline, and a full backlog.
	synctest.Test(t, func(t *testing.T) {
		var rejections []observe.Reject
		l := newLimiter(t, fixed(t, 1), &LimiterOptions{
			Wait: WaitLIFO, MaxWait: time.Second, MaxWaiters: 1,
			Observer: &observe.Observer{OnReject: func(_ context.Context, r observe.Reject) { rejections = append(rejections, r) }},
		})
		hold := mustAcquire(t, l, "")
		defer hold.Success()

		start := time.Now()
		_, err := l.Acquire(context.Background())
		assert.ErrorIs(t, err, ErrLimitExceeded, "MaxWait")
		assert.Equal(t, time.Second, time.Since(start), "MaxWait")

		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start = time.Now()
		_, err = l.Acquire(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "context deadline")
		assert.Equal(t, 300*time.Millisecond, time.Since(start), "context deadline")

		ctx, cancel = context.WithCancel(context.Background())
		errs := make(chan error)
		go func() {
			_, err := l.Acquire(ctx)
			errs <- err
		}()
		synctest.Wait()
		_, err = l.Acquire(context.Background())
		assert.ErrorIs(t, err, ErrLimitExceeded, "backlog of 1 full: no wait")
		cancel()
		assert.ErrorIs(t, <-errs, context.Canceled, "waiter cancelled")

		s := l.Stats()
		assert.Equal(t, 0, s.Waiting)
		assert.Equal(t, uint64(4), s.Rejected)
		assert.Len(t, rejections, 4)
	})
}

func TestWaitSkipsInadmissibleClasses(t *testing.T) {
	// Ordered mode, limit 4: background may fill 2 slots, critical 4. A
	// background waiter queued first cannot use a slot freed at 3 in
	// flight, so the critical waiter behind it gets it.
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, fixed(t, 4), &LimiterOptions{Wait: WaitFIFO, MaxWait: time.Minute, Criticality: &CriticalityOptions{}})
		var held []Token
		for range 4 {
			held = append(held, mustAcquire(t, l, ClassCritical))
		}
		got := make(chan string, 2)
		for _, class := range []string{ClassBackground, ClassCritical} {
			go func() {
				tok, err := l.AcquirePartition(context.Background(), class)
				if err != nil {
					got <- "rejected " + class
					return
				}
				got <- class
				tok.Success()
			}()
			synctest.Wait()
		}
		held[0].Success()
		assert.Equal(t, ClassCritical, <-got)
		held[1].Success()
		held[2].Success() // 1 in flight: background fits
		assert.Equal(t, ClassBackground, <-got)
		held[3].Success()
	})
}

// grantedWaiter returns a waiter that a release granted a token to, as if
// the grant raced with the waiter giving up (ready is left open so that
// await takes the give-up path).
func grantedWaiter(l *Limiter) *waiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &waiter{ready: make(chan struct{}), granted: true}
	w.tok = l.take(l.fallback, l.clock())
	return w
}

func TestWaitGrantRacesGivingUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, fixed(t, 1), &LimiterOptions{Wait: WaitFIFO, MaxWait: time.Second})

		// The caller's context ended: the token goes back, unsampled.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		tok, err := l.await(ctx, grantedWaiter(l))
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, Token{}, tok)
		assert.Equal(t, Stats{Limit: 1, Ignored: 1}, l.Stats())

		// Only MaxWait passed: the caller keeps the token.
		tok, err = l.await(context.Background(), grantedWaiter(l))
		require.NoError(t, err)
		assert.Equal(t, 1, l.InFlight())
		tok.Success()
		assert.Equal(t, Stats{Limit: 1, Succeeded: 1, Ignored: 1}, l.Stats())
	})
}
