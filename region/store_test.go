package region_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
	"go.uber.org/goleak"
)

var regions = []region.Region{{Name: "a", Floor: 0.1}, {Name: "b", Floor: 0.1}}

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newStore(t *testing.T, c *clock, coord region.Coordinator, self string, opts *region.Options) *region.Store {
	t.Helper()
	local, err := memstore.New(&memstore.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	o := region.Options{Manual: true, Now: c.now}
	if opts != nil {
		o = *opts
		o.Now = c.now
	}
	s, err := region.New(local, coord, regions, self, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestBind(t *testing.T) {
	coord, _ := region.NewMemCoordinator(regions)
	c := &clock{time.Unix(6000, 0)}
	s := newStore(t, c, coord, "a", nil)
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1},
		floodgate.FixedWindow{Limit: 10, Window: 4 * time.Second}, // shorter than 4·Interval + 2·Margin
	} {
		if _, err := floodgate.New(s, alg, nil); !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Errorf("New(%v) = %v, want ErrInvalidConfig", alg, err)
		}
	}
	if _, err := region.New(nil, coord, regions, "a", nil); !errors.Is(err, region.ErrInvalid) {
		t.Errorf("New(nil local) = %v", err)
	}
	local, _ := memstore.New(nil)
	if _, err := region.New(local, coord, regions, "z", nil); !errors.Is(err, region.ErrInvalid) {
		t.Errorf("New(unknown region) = %v", err)
	}
}

// TestDecisions follows one region's decisions: its floor before any
// reconcile, its grant after, denials beyond it without an error, and
// the smaller of two windows' grants near a boundary.
func TestDecisions(t *testing.T) {
	coord, _ := region.NewMemCoordinator(regions)
	c := &clock{time.Unix(6000, 0).Add(10 * time.Second)} // 10s into a minute's window
	s := newStore(t, c, coord, "a", nil)
	alg := floodgate.FixedWindow{Limit: 100, Window: time.Minute}
	l, err := floodgate.New(s, alg, &floodgate.Options{Name: "api"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admitted := 0
	for range 30 {
		d, err := l.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		} else if d.RetryAfter <= 0 {
			t.Fatalf("denial with RetryAfter %v", d.RetryAfter)
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d before any reconcile, want the floor, 10", admitted)
	}
	// One reconcile reports the demand (30 per second) and raises a's grant.
	c.t = c.t.Add(time.Second)
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	a := s.Allocation("api", alg, "k")
	if a.Granted <= 10 || a.Limit != a.Granted {
		t.Fatalf("after a reconcile: %+v, want more than the floor", a)
	}
	// n above the allocation but within the quota is a denial, not an error.
	d, err := l.AllowN(ctx, "k", 100)
	if err != nil || d.Allowed {
		t.Fatalf("AllowN(100) = %+v, %v; want a denial", d, err)
	}
	if st := s.Stats(); st.Intervals != 1 || st.Calls < 1 || st.Calls > 2 || st.MaxCallsPerInterval > 2 {
		t.Fatalf("Stats = %+v", st)
	}
	// Within Margin of the end of the window, the next window's grant (the
	// floor: nothing granted yet) bounds decisions.
	c.t = time.Unix(6060, 0).Add(-100 * time.Millisecond)
	if a := s.Allocation("api", alg, "k"); a.Limit != 10 {
		t.Fatalf("near the boundary: %+v, want Limit 10", a)
	}
}

// TestTwoRegions runs two regions to a fair split, and checks that a
// Hook error stops an interval as a crash would.
func TestTwoRegions(t *testing.T) {
	coord, _ := region.NewMemCoordinator(regions)
	c := &clock{time.Unix(6000, 0)}
	crash := false
	sa := newStore(t, c, coord, "a", &region.Options{Manual: true, Hook: func(st region.Step) error {
		if crash && st == region.StepDebited {
			return errors.New("crash")
		}
		return nil
	}})
	sb := newStore(t, c, coord, "b", nil)
	alg := floodgate.FixedWindow{Limit: 1000, Window: time.Minute}
	la, _ := floodgate.New(sa, alg, &floodgate.Options{Name: "api"})
	lb, _ := floodgate.New(sb, alg, &floodgate.Options{Name: "api"})
	ctx := context.Background()
	var ga, gb region.Allocation
	for i := range 59 {
		for range 30 {
			_, _ = la.Allow(ctx, "k")
		}
		for range 10 {
			_, _ = lb.Allow(ctx, "k")
		}
		c.t = c.t.Add(time.Second)
		_ = sa.Reconcile(ctx)
		_ = sb.Reconcile(ctx)
		if i == 19 {
			ga, gb = sa.Allocation("api", alg, "k"), sb.Allocation("api", alg, "k")
		}
	}
	if ga.Granted-ga.Debited+gb.Granted-gb.Debited > 1000 {
		t.Fatalf("allocations %+v and %+v exceed the quota", ga, gb)
	}
	// a used about 600 in the first 20s and b 200; b wants 400 more for
	// the 40s left, a 1,200: max-min gives b 400 to 600 (with a's 600 kept).
	if gb.Granted < 390 || gb.Granted > 610 {
		t.Fatalf("b holds %+v, want 400 to 600", gb)
	}
	// The next window was shared by demand: 1,800 and 600 wanted of
	// 1,000 is 500 each, max-min.
	if a, b := sa.Allocation("api", alg, "k"), sb.Allocation("api", alg, "k"); a.Next < 490 || b.Next < 490 || a.Next+b.Next > 1000 {
		t.Fatalf("next window: a %+v, b %+v; want 500 each", a, b)
	}
	crash = true
	// In it, a asks for nothing: it debits, then crashes before reporting.
	c.t = time.Unix(6065, 0)
	err := sa.Reconcile(ctx)
	if err == nil {
		t.Fatal("Reconcile with a crashing hook returned nil")
	}
	if st := sa.Stats(); st.StrandedUnits == 0 {
		t.Fatalf("crash after a debit stranded nothing: %+v", st)
	}
}

func TestClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	coord, _ := region.NewMemCoordinator(regions)
	local, _ := memstore.New(nil)
	s, err := region.New(local, coord, regions, "a", &region.Options{Interval: 10 * time.Millisecond, Margin: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := floodgate.New(s, floodgate.FixedWindow{Limit: 100, Window: time.Second}, nil)
	_, _ = l.Allow(context.Background(), "k")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), "k"); !errors.Is(err, floodgate.ErrClosed) || !errors.Is(err, floodgate.ErrUnavailable) {
		t.Fatalf("Allow after Close = %v", err)
	}
}

// undoRecorder is a local store whose Bounds count the OpTakeUpTo steps
// that are not checks (a reconciler's debits) and those of them asking
// floodgate.Request.UndoLate.
type undoRecorder struct {
	floodgate.Store
	debits, undoLate int
}

func (u *undoRecorder) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := u.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return undoBound{b, u}, nil
}

type undoBound struct {
	floodgate.Bound
	u *undoRecorder
}

func (b undoBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if req.Op == floodgate.OpTakeUpTo && !req.Check {
		b.u.debits++
		if req.UndoLate {
			b.u.undoLate++
		}
	}
	return b.Bound.Apply(ctx, key, req, each)
}

// TestDebitsAskUndoLate: a reconciler's debit (an OpTakeUpTo on the local
// store) asks UndoLate, so that a debit that failed for the reconciler (a
// timeout, never reported) and was made all the same is given back rather
// than stranded. Region a uses 30 of a window's 1,000 units a second and
// then none: it debits what it holds beyond its target.
func TestDebitsAskUndoLate(t *testing.T) {
	coord, _ := region.NewMemCoordinator(regions)
	c := &clock{time.Unix(6000, 0)}
	mem, err := memstore.New(&memstore.Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	rec := &undoRecorder{Store: mem}
	sa, err := region.New(rec, coord, regions, "a", &region.Options{Manual: true, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sa.Close() })
	sb := newStore(t, c, coord, "b", nil)
	alg := floodgate.FixedWindow{Limit: 1000, Window: time.Minute}
	la, _ := floodgate.New(sa, alg, &floodgate.Options{Name: "api"})
	lb, _ := floodgate.New(sb, alg, &floodgate.Options{Name: "api"})
	ctx := context.Background()
	for i := range 120 {
		if i < 59 {
			for range 30 {
				_, _ = la.Allow(ctx, "k")
			}
		}
		for range 10 {
			_, _ = lb.Allow(ctx, "k")
		}
		c.t = c.t.Add(time.Second)
		_ = sa.Reconcile(ctx)
		_ = sb.Reconcile(ctx)
	}
	if rec.debits == 0 {
		t.Fatalf("region a made no debit: %+v", sa.Stats())
	}
	if rec.undoLate != rec.debits {
		t.Fatalf("%d of %d debits asked UndoLate", rec.undoLate, rec.debits)
	}
}
