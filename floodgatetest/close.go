package floodgatetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// closeTimeout bounds each call of the Close cases: a closed store answers
// at once.
const closeTimeout = 10 * time.Second

// runClose checks, for a store that implements io.Closer, on a virtual
// clock and on the store's own: decisions racing Close either decide or
// fail; once Close has returned, every decision, through every route and
// for every algorithm, fails with an error matching
// floodgate.ErrUnavailable, without hanging; so do the decisions of a
// Limiter made after Close, if Bind accepts it.
func (h *harness) runClose(t *testing.T) {
	for _, clock := range []struct {
		name string
		now  func() time.Time
	}{
		{"VirtualClock", NewClock(t0).Now},
		{"OwnClock", nil},
	} {
		t.Run(clock.name, func(t *testing.T) {
			s := h.open(t, clock.now)
			if s.closer == nil {
				t.Skipf("%T does not implement io.Closer", s.Store)
			}
			ctx := context.Background()
			var algs []floodgate.Algorithm
			for _, alg := range fiveAlgorithms() {
				// A conservative store may refuse an algorithm at Bind.
				if !h.opts.Conservative || h.supported(t, s, alg) {
					algs = append(algs, alg)
				}
			}
			ps := make([]pair, len(algs))
			for i, alg := range algs {
				ps[i] = s.pair(t, alg)
				if _, err := ps[i].lim.Allow(ctx, "open"); err != nil {
					t.Fatalf("%v Allow before Close: %v", alg, err)
				}
			}
			h.racingClose(t, s, ps)
			withTimeout(t, closeTimeout, "the decisions after Close", func() {
				for _, p := range ps {
					for _, err := range decideAll(ctx, p, "open") {
						if !errors.Is(err, floodgate.ErrUnavailable) {
							t.Errorf("%v after Close: %v, want an error matching ErrUnavailable", p.alg, err)
						}
					}
				}
				lim, err := floodgate.New(s.Store, algs[0], &floodgate.Options{Name: name})
				if err != nil {
					return // refusing to bind after Close is fine
				}
				if _, err := lim.Allow(ctx, "open"); !errors.Is(err, floodgate.ErrUnavailable) {
					t.Errorf("Allow of a Limiter made after Close = %v, want an error matching ErrUnavailable", err)
				}
			})
		})
	}
}

// racingClose closes s while goroutines decide on it: a decision racing
// Close decides or fails, and none admitted after Close returned.
func (h *harness) racingClose(t *testing.T, s *store, ps []pair) {
	t.Helper()
	var (
		closed atomic.Bool
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
	)
	started := make(chan struct{}, len(ps))
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("racing/%d", i)
			for n := 0; ; n++ {
				after := closed.Load()
				_, err := p.lim.Apply(context.Background(), key, upTo(1), nil)
				if n == 0 {
					started <- struct{}{}
				}
				switch {
				case err != nil:
					return
				case after:
					mu.Lock()
					errs = append(errs, fmt.Errorf("%v decided after Close returned", p.alg))
					mu.Unlock()
					return
				}
			}
		}()
	}
	for range ps {
		<-started
	}
	withTimeout(t, closeTimeout, "Close", func() { s.close(t) })
	closed.Store(true)
	withTimeout(t, closeTimeout, "the decisions racing Close", wg.Wait)
	for _, err := range errs {
		t.Error(err)
	}
}

// decideAll makes a decision on key by every route, and a Wait if they all
// failed, and returns their errors.
func decideAll(ctx context.Context, p pair, key string) []error {
	var errs []error
	for _, req := range []floodgate.Request{take(1), reserve(1, time.Hour), upTo(1), {Op: floodgate.OpSettle, N: -1, At: t0}} {
		for _, r := range routes(req) {
			_, err := p.do(ctx, r, key, req)
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		if err == nil {
			return errs // a Wait would sleep on this store
		}
	}
	// The deadline bounds the Wait of a store that still decides after
	// Close.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	errs = append(errs, p.lim.Wait(wctx, key, 1))
	return errs
}
