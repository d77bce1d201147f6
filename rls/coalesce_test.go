package rls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

// gatedStore counts the store calls and holds the first until release is
// closed, so that a test can have takes join a call in flight; with fail
// set, every call after the first fails with it.
type gatedStore struct {
	floodgate.Store
	release chan struct{}
	fail    error

	mu    sync.Mutex
	calls int
}

func (g *gatedStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := g.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return gatedBound{b, g}, nil
}

func (g *gatedStore) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

type gatedBound struct {
	floodgate.Bound
	g *gatedStore
}

func (b gatedBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b.g.mu.Lock()
	b.g.calls++
	first := b.g.calls == 1
	b.g.mu.Unlock()
	if first {
		<-b.g.release
	} else if b.g.fail != nil {
		return floodgate.Result{}, b.g.fail
	}
	return b.Bound.Apply(ctx, key, req, each)
}

// outcome is what a take got.
type outcome struct {
	n         int64
	allowed   bool
	remaining int64
	err       error
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("%d: %v", o.n, o.err)
	}
	return fmt.Sprintf("%d: allowed=%v remaining=%d", o.n, o.allowed, o.remaining)
}

// joinGroup makes the takes of ns on one counter of a fixed window of
// limit 10 a minute, on store gated: the first goes out and is held, the
// others join it one after another, in order, and then the first is
// released. It returns each take's outcome, in the order of ns.
func joinGroup(t *testing.T, store floodgate.Store, fail error, ctxs []context.Context, ns ...int64) ([]outcome, *gatedStore) {
	t.Helper()
	g := &gatedStore{Store: store, release: make(chan struct{}), fail: fail}
	lim, err := floodgate.New(g, floodgate.FixedWindow{Limit: 10, Window: time.Minute}, &floodgate.Options{Name: "coalesce"})
	require.NoError(t, err)
	var c coalescer
	out := make([]outcome, len(ns))
	var wg sync.WaitGroup
	for i, n := range ns {
		ctx := context.Background()
		if ctxs != nil && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Go(func() {
			res, err := c.take(ctx, lim, "k", n)
			out[i] = outcome{n: n, allowed: res.Allowed, remaining: res.Remaining, err: err}
		})
		// Wait until the take is in: the first in flight (held by the
		// gate), each other among the waiting, so that their order is
		// ns's.
		for {
			c.mu.Lock()
			f := c.flights[flightKey{lim, "k"}]
			in := f != nil && len(f.waiting) == i
			c.mu.Unlock()
			if in && g.count() == 1 {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	close(g.release)
	wg.Wait()
	c.wait()
	require.Empty(t, c.flights, "flights left after every take returned")
	return out, g
}

// TestCoalesce: takes of one counter that arrive while a call is in
// flight are decided together, with the answers each would get alone.
func TestCoalesce(t *testing.T) {
	for _, sk := range stores(t) {
		if strings.Contains(sk.name, "/") {
			continue // the service's options play no part here
		}
		t.Run(sk.name, func(t *testing.T) {
			t.Run("admitted whole", func(t *testing.T) {
				out, g := joinGroup(t, sk.make(t, newClock(t0).Now), nil, nil, 1, 2, 3, 1)
				want := []string{"1: allowed=true remaining=9", "2: allowed=true remaining=7", "3: allowed=true remaining=4", "1: allowed=true remaining=3"}
				require.Equal(t, want, strs(out))
				require.Equal(t, 2, g.count(), "store calls: the first take's and the group's")
			})
			t.Run("no member fits", func(t *testing.T) {
				out, g := joinGroup(t, sk.make(t, newClock(t0).Now), nil, nil, 8, 3, 4)
				want := []string{"8: allowed=true remaining=2", "3: allowed=false remaining=2", "4: allowed=false remaining=2"}
				require.Equal(t, want, strs(out))
				require.Equal(t, 2, g.count(), "store calls: the group's denial is every member's")
			})
			t.Run("some members fit", func(t *testing.T) {
				// 6 left; the group's 8 do not fit, so each is decided
				// alone, in any order: what is admitted plus what is left
				// is 6, and each denied take is more than what is left.
				out, g := joinGroup(t, sk.make(t, newClock(t0).Now), nil, nil, 4, 3, 3, 2)
				require.Equal(t, 5, g.count(), "store calls: the first, the group's, then one per member")
				checkSerial(t, 10, out)
				var admitted int64
				for _, o := range out[1:] {
					if o.allowed {
						admitted += o.n
					}
				}
				require.Contains(t, []int64{6, 5}, admitted, "admitted of 3, 3, 2 with 6 left: %v", out)
			})
			t.Run("more than the limit holds", func(t *testing.T) {
				// 6 + 6 is more than the limit of 10 (ErrExceedsLimit):
				// each is decided alone, and one fits.
				out, _ := joinGroup(t, sk.make(t, newClock(t0).Now), nil, nil, 1, 6, 6)
				require.NoError(t, out[1].err)
				require.NoError(t, out[2].err)
				require.True(t, out[1].allowed != out[2].allowed, "one of two takes of 6 with 9 left: %v", out)
				checkSerial(t, 10, out)
			})
			t.Run("store error", func(t *testing.T) {
				boom := errors.New("boom")
				out, _ := joinGroup(t, sk.make(t, newClock(t0).Now), boom, nil, 1, 2, 3)
				require.NoError(t, out[0].err)
				require.ErrorIs(t, out[1].err, boom)
				require.ErrorIs(t, out[2].err, boom)
			})
			t.Run("member gives up", func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				ctxs := []context.Context{nil, ctx, nil}
				var out []outcome
				done := make(chan struct{})
				go func() {
					defer close(done)
					out, _ = joinGroup(t, sk.make(t, newClock(t0).Now), nil, ctxs, 1, 2, 3)
				}()
				cancel()
				<-done
				require.Equal(t, "1: allowed=true remaining=9", out[0].String())
				require.ErrorIs(t, out[1].err, context.Canceled)
				require.True(t, out[2].allowed, "the member that waited: %v", out[2])
			})
		})
	}
}

// TestCoalesceConcurrent: many goroutines take 1 to 3 units of one
// counter on a store with a round trip's latency, so that most takes are
// coalesced. The admitted takes' answers are those of one serial order:
// sorted by what they report left, each reports the limit less the units
// admitted up to it. The counter is exact afterwards, and with takes of
// 1 left over, the limit is used up.
func TestCoalesceConcurrent(t *testing.T) {
	for _, sk := range stores(t) {
		if strings.Contains(sk.name, "/") {
			continue
		}
		t.Run(sk.name, func(t *testing.T) {
			const limit, workers, perWorker = 150, 32, 8
			store := slowStore{sk.make(t, newClock(t0).Now)}
			lim, err := floodgate.New(store, floodgate.FixedWindow{Limit: limit, Window: time.Minute}, &floodgate.Options{Name: "coalesce"})
			require.NoError(t, err)
			var c coalescer
			var mu sync.Mutex
			var out []outcome
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range perWorker {
						n := int64(1 + (w+i)%3)
						res, err := c.take(context.Background(), lim, "k", n)
						mu.Lock()
						out = append(out, outcome{n: n, allowed: res.Allowed, remaining: res.Remaining, err: err})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			c.wait()
			checkSerial(t, limit, out)
			res, err := lim.Apply(context.Background(), "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil)
			require.NoError(t, err)
			var admitted int64
			for _, o := range out {
				if o.allowed {
					admitted += o.n
				}
			}
			left := res.Remaining
			if res.Allowed {
				left-- // a check of one unit reports what would be left after it
			}
			require.Equal(t, limit-admitted, left, "left after %d units admitted", admitted)
			require.Zero(t, left, "256 takes of 1 to 3 units want more than 150")
		})
	}
}

// checkSerial checks that outcomes are those of one serial order of takes
// on a fixed window of limit that started full: the admitted ones, sorted
// by what they report left, each report limit less the units admitted up
// to and including it, and a denied one reports less left than it asks.
func checkSerial(t *testing.T, limit int64, out []outcome) {
	t.Helper()
	var admitted []outcome
	for _, o := range out {
		require.NoError(t, o.err)
		if o.allowed {
			admitted = append(admitted, o)
		} else {
			require.Less(t, o.remaining, o.n, "a denied take: %v", o)
		}
	}
	slices.SortFunc(admitted, func(a, b outcome) int { return int(b.remaining - a.remaining) })
	used := int64(0)
	for _, o := range admitted {
		used += o.n
		require.Equal(t, limit-used, o.remaining, "take %v after %d units of %v", o, used, admitted)
	}
}

func strs(out []outcome) []string {
	s := make([]string, len(out))
	for i, o := range out {
		s[i] = o.String()
	}
	return s
}
