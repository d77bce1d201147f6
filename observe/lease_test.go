package observe_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// TestStoreOverLease composes observe.Store with lease.New both ways, as
// floodgate.New(observe.Store(lease.New(observe.Store(memstore)))): the
// outer Tally counts every decision the limiter's callers were told,
// those served from pools included, under the limiter's name; the inner
// one counts, under the same name, the round trips the pools made to the
// store: their refills (take_up_to), the takes they forwarded and the
// units they gave back at Close (refund).
func TestStoreOverLease(t *testing.T) {
	mem, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	var outer, inner observe.Tally
	remote, err := observe.Store(mem, &observe.Observer{Tally: &inner})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := lease.New(remote, &lease.Options{MinBatch: 8, MaxBatch: 32})
	if err != nil {
		t.Fatal(err)
	}
	s, err := observe.Store(ls, &observe.Observer{Tally: &outer})
	if err != nil {
		t.Fatal(err)
	}
	// A quota of 1,000 that refills by one unit an hour: the callers ask
	// for more than that, so the pools run dry and the store denies.
	const quota, keys = 1000, 3
	l, err := floodgate.New(s, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: quota}, &floodgate.Options{Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 200
	var told [4]atomic.Uint64
	var units atomic.Uint64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range each {
				n := int64(1)
				if i%10 == 9 {
					n = 40 // above MaxBatch: forwarded to the store
				}
				d, err := l.AllowN(ctx, fmt.Sprint("k", (g+i)%keys), n)
				o := observe.Denied
				switch {
				case err != nil:
					o = observe.Failed
					t.Errorf("AllowN: %v", err)
				case d.Allowed:
					o = observe.Allowed
				}
				told[o].Add(1)
				units.Add(uint64(n))
			}
		}()
	}
	wg.Wait()
	st := ls.Stats()
	if err := s.(interface{ Close() error }).Close(); err != nil { // closes ls
		t.Fatal(err)
	}
	afterClose := ls.Stats()

	c := counts(t, &outer, "api")
	var want [observe.NumActions][4]uint64
	for o := range 4 {
		want[observe.ActionTake][o] = told[o].Load()
	}
	if c.Decisions != want {
		t.Errorf("outer Tally: Decisions %v, want the takes callers were told: %v", c.Decisions, want)
	}
	if got := c.Units[observe.ActionTake][observe.Allowed] + c.Units[observe.ActionTake][observe.Denied]; got != units.Load() {
		t.Errorf("outer Tally: %d units, want the %d asked for", got, units.Load())
	}
	if a := c.Decisions[observe.ActionTake][observe.Allowed]; a == 0 || told[observe.Denied].Load() == 0 {
		t.Errorf("%d admitted, %d denied: the test wants both", a, told[observe.Denied].Load())
	}
	if st.Local == 0 {
		t.Errorf("lease Stats %+v: no decision served from a pool", st)
	}

	in := counts(t, &inner, "api")
	var refills, forwarded, refunds uint64
	for o := range 4 {
		refills += in.Decisions[observe.ActionTakeUpTo][o]
		forwarded += in.Decisions[observe.ActionTake][o]
		refunds += in.Decisions[observe.ActionRefund][o]
	}
	if refills != uint64(afterClose.Leases) || refills == 0 {
		t.Errorf("inner Tally: %d take_up_to steps, lease Stats: %d leases; want equal, and some", refills, afterClose.Leases)
	}
	if forwarded != uint64(afterClose.Forwarded) || forwarded == 0 {
		t.Errorf("inner Tally: %d takes, lease Stats: %d forwarded; want equal, and some", forwarded, afterClose.Forwarded)
	}
	if back := in.Units[observe.ActionRefund][observe.Allowed]; back < uint64(afterClose.Returned) {
		t.Errorf("inner Tally: %d units refunded, lease Stats: %d returned; want at least as many", back, afterClose.Returned)
	}
	if refunds == 0 && afterClose.Returned > 0 {
		t.Errorf("inner Tally: no refund, lease Stats: %d units returned", afterClose.Returned)
	}
	// The pools admit no unit the store did not lease them: what the
	// callers were told was admitted is at most what the store admitted,
	// which is at most the quota of each of the 3 keys.
	leased := in.Units[observe.ActionTake][observe.Allowed] + uint64(afterClose.Leased)
	if admitted := c.Units[observe.ActionTake][observe.Allowed]; admitted > leased || admitted > keys*quota {
		t.Errorf("%d units admitted, the store admitted %d of a quota of %d on each of %d keys", admitted, leased, quota, keys)
	}
}
