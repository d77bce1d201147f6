package floodgatetest_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// refStore is the smallest store that passes floodgatetest.Run: the
// reference decisions under one mutex, on a clock. Its test is
//
//	func TestRefStore(t *testing.T) {
//		floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
//			return newRefStore(now)
//		}, nil)
//	}
type refStore struct {
	now func() time.Time
	mu  sync.Mutex
	ref floodgatetest.Reference // the states, one per name, key and kind
}

// newRefStore returns a refStore on the clock now; nil means time.Now.
func newRefStore(now func() time.Time) *refStore {
	if now == nil {
		now = time.Now
	}
	return &refStore{now: now}
}

func (s *refStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	if err := alg.Validate(); err != nil {
		return nil, err
	}
	return refBound{s, name, alg}, nil
}

type refBound struct {
	s    *refStore
	name string
	alg  floodgate.Algorithm
}

// Apply applies the step atomically: the clock is read under the lock, so
// that the steps on a key see time in the order they run.
func (b refBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.s.ref.Apply(b.name, key, b.alg, b.s.now(), req, each)
}

func (b refBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// The store decides as every floodgate store does; a test holds it to that
// with floodgatetest.Run.
func Example() {
	clock := floodgatetest.NewClock(time.Unix(1_700_000_000, 0))
	lim, err := floodgate.New(newRefStore(clock.Now), floodgate.FixedWindow{Limit: 2, Window: time.Second}, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		d, _ := lim.Allow(ctx, "user:1")
		fmt.Printf("allowed %v, remaining %d, retry after %v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Advance(time.Second)
	d, _ := lim.Allow(ctx, "user:1")
	fmt.Printf("a second later: allowed %v, remaining %d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed true, remaining 1, retry after 0s
	// allowed true, remaining 0, retry after 0s
	// allowed false, remaining 0, retry after 1s
	// a second later: allowed true, remaining 1
}
