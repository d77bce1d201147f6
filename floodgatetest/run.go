package floodgatetest

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Run runs the conformance cases against the stores newStore returns, each
// group of cases in a subtest: "Steps", "Errors", "Reference", "Models",
// "StateIdentity", "Concurrent", "OwnClock" and "Close" for an exact store
// (a nil opts); see Options for a conservative one.
//
// newStore is called once or more per subtest, from the subtest's
// goroutine. Each call must return a fresh store in which no key has a
// state: on a shared backend, give every store a key prefix of its own
// (and delete its keys in a t.Cleanup, if the backend keeps them). A
// non-nil now is the store's clock: a virtual one, which Run moves
// forwards, backwards and not at all, and reads from many goroutines at
// once. A nil now means the store's own clock (for example a server's
// time); the cases run on it check only what does not depend on the exact
// instant. A store that cannot take a clock skips (t.Skip) when now is not
// nil.
//
// If a store implements io.Closer, Run closes it when the subtest that
// made it ends, and the Close cases check that its decisions fail after
// Close. That type assertion is a convenience of the harness, not a
// behaviour floodgate relies on: a store needs no Close, and one without
// skips those cases.
func Run(t *testing.T, newStore func(t *testing.T, now func() time.Time) floodgate.Store, opts *Options) {
	t.Helper()
	h := &harness{newStore: newStore, seed: seed(t)}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Conservative {
		h.runConservative(t)
		return
	}
	t.Run("Steps", h.runSteps)
	t.Run("Errors", h.runErrors)
	t.Run("Reference", h.runReference)
	t.Run("Models", h.runModels)
	t.Run("StateIdentity", h.runIdentity)
	t.Run("Concurrent", h.runConcurrent)
	t.Run("OwnClock", h.runOwnClock)
	t.Run("Close", h.runClose)
}

// harness holds what the cases of one Run share.
type harness struct {
	newStore func(t *testing.T, now func() time.Time) floodgate.Store
	opts     Options
	seed     uint64
}

// seedEnv names the environment variable that replays the randomized
// cases of a failed run.
const seedEnv = "FLOODGATETEST_SEED"

// seed returns the seed of the randomized cases: FLOODGATETEST_SEED when
// set, else a new one.
func seed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("floodgatetest: %s=%q: %v", seedEnv, v, err)
		}
		return s
	}
	return rand.Uint64()
}

// rng returns the random source of trace i of the subtest t: the same for
// the same seed, subtest and i.
func (h *harness) rng(t *testing.T, i int) *gen {
	f := fnv.New64a()
	_, _ = f.Write([]byte(t.Name()))
	return &gen{rand.New(rand.NewPCG(h.seed^f.Sum64(), uint64(i)))}
}

// replay says how to replay a randomized failure.
func (h *harness) replay() string {
	return fmt.Sprintf("(%s=%d reproduces this run)", seedEnv, h.seed)
}

// gen draws the random choices of a trace.
type gen struct{ r *rand.Rand }

// int64s returns a number in [lo, hi]: one of the bounds a quarter of the
// time, where off-by-one errors live (n equal to the quota, a delay bound
// of exactly the wait, a step of one nanosecond), else any.
func (g *gen) int64s(lo, hi int64) int64 {
	switch g.r.IntN(8) {
	case 0:
		return lo
	case 1:
		return hi
	}
	return lo + g.r.Int64N(hi-lo+1)
}

// ints returns a number in [lo, hi], uniformly: the choices among cases.
func (g *gen) ints(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

// count returns a number in [lo, hi], biased to the bounds as int64s is
// and to short lengths, where a failure is easiest to read: the lengths of
// traces (on average about as long as pgregory.net/rapid's draws, which the
// traces used before).
func (g *gen) count(lo, hi int) int {
	n := g.int64s(int64(lo), int64(hi))
	if g.r.IntN(2) == 0 {
		n = g.int64s(int64(lo), n)
	}
	return int(n)
}

// dur returns a duration in [lo, hi].
func (g *gen) dur(lo, hi time.Duration) time.Duration {
	return time.Duration(g.int64s(int64(lo), int64(hi)))
}

// t0 is the virtual clocks' starting instant, aligned to every window the
// cases use.
var t0 = time.Unix(1_700_000_000, 0)

// store is a store under test.
type store struct {
	floodgate.Store
	closer io.Closer // nil when the store has no Close
	closed atomic.Bool
}

// open returns a store from newStore, closed when t ends if it has a
// Close.
func (h *harness) open(t *testing.T, now func() time.Time) *store {
	t.Helper()
	s := h.newStore(t, now)
	if s == nil {
		t.Fatal("floodgatetest: newStore returned a nil Store")
	}
	return h.adopt(t, s)
}

// adopt returns s as a store under test, closed when t ends if it has a
// Close.
func (h *harness) adopt(t *testing.T, s floodgate.Store) *store {
	t.Helper()
	st := &store{Store: s}
	if c, ok := s.(io.Closer); ok {
		st.closer = c
		t.Cleanup(func() { st.close(t) })
	}
	return st
}

// close closes the store once.
func (s *store) close(t *testing.T) {
	if s.closer == nil || !s.closed.CompareAndSwap(false, true) {
		return
	}
	if err := s.closer.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
}

// name is the name of the limiters of the cases that do not choose one:
// they all share a key's state per kind, as limiters of one name do.
const name = "floodgatetest"

// limiter returns floodgate.New(s, alg) named name, or under the name
// derived from alg when name is "".
func (s *store) limiter(t *testing.T, name string, alg floodgate.Algorithm) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(s.Store, alg, &floodgate.Options{Name: name})
	if err != nil {
		t.Fatalf("floodgate.New(store, %v, %q) = %v", alg, name, err)
	}
	return l
}

// bound returns s.Bind(name, alg).
func (s *store) bound(t *testing.T, name string, alg floodgate.Algorithm) floodgate.Bound {
	t.Helper()
	b, err := s.Bind(name, alg)
	if err != nil {
		t.Fatalf("Bind(%q, %v) = %v", name, alg, err)
	}
	if b == nil {
		t.Fatalf("Bind(%q, %v) returned a nil Bound", name, alg)
	}
	return b
}

// pair is a limiter and the Bound of its name and algorithm on the same
// store: the two ways into a store that the cases drive.
type pair struct {
	name string // the limiter's: Options.Name, or derived
	alg  floodgate.Algorithm
	lim  *floodgate.Limiter
	b    floodgate.Bound
}

// pair returns the pair of alg under the cases' name.
func (s *store) pair(t *testing.T, alg floodgate.Algorithm) pair {
	t.Helper()
	return s.named(t, name, alg)
}

// named returns the pair of alg under name, or under the name derived from
// alg when name is "".
func (s *store) named(t *testing.T, name string, alg floodgate.Algorithm) pair {
	t.Helper()
	lim := s.limiter(t, name, alg)
	return pair{name: lim.Name(), alg: alg, lim: lim, b: s.bound(t, lim.Name(), alg)}
}

// route is one way a request reaches a store.
type route uint8

const (
	viaAllowN       route = iota // Limiter.Allow or AllowN: Bound.Take
	viaReserve                   // Limiter.Reserve
	viaLimiterApply              // Limiter.Apply
	viaBoundTake                 // Bound.Take, not through a Limiter
	viaBoundApply                // Bound.Apply, not through a Limiter
)

func (r route) String() string {
	return [...]string{"AllowN", "Reserve", "Limiter.Apply", "Bound.Take", "Bound.Apply"}[r]
}

// full reports whether the route returns a whole Result rather than a
// Decision.
func (r route) full() bool { return r == viaLimiterApply || r == viaBoundApply }

// routes returns the routes that can carry req.
func routes(req floodgate.Request) []route {
	switch {
	case req.Check:
		return []route{viaLimiterApply, viaBoundApply}
	case req.Op == floodgate.OpTake && req.MaxDelay == 0:
		return []route{viaAllowN, viaReserve, viaLimiterApply, viaBoundTake, viaBoundApply}
	case req.Op == floodgate.OpTake:
		return []route{viaReserve, viaLimiterApply, viaBoundApply}
	}
	return []route{viaLimiterApply, viaBoundApply}
}

// applyRoutes are the routes of a request with per-limit Decisions to
// fill.
var applyRoutes = []route{viaLimiterApply, viaBoundApply}

// typed returns the route of the Limiter method a user calls for req.
func typed(req floodgate.Request) route {
	switch {
	case req.Check:
		return viaLimiterApply
	case req.Op == floodgate.OpTake && req.MaxDelay == 0:
		return viaAllowN
	case req.Op == floodgate.OpTake:
		return viaReserve
	}
	return viaLimiterApply
}

// do sends req for key by route r. A route that reports a Decision only
// returns a Result holding just that Decision.
func (p pair) do(ctx context.Context, r route, key string, req floodgate.Request) (floodgate.Result, error) {
	return p.doEach(ctx, r, key, req, nil)
}

// doEach is do with each for the per-limit Decisions, which only the
// Apply routes fill.
func (p pair) doEach(ctx context.Context, r route, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	var (
		d   floodgate.Decision
		err error
	)
	switch r {
	case viaAllowN:
		if req.N == 1 {
			d, err = p.lim.Allow(ctx, key)
		} else {
			d, err = p.lim.AllowN(ctx, key, req.N)
		}
	case viaReserve:
		d, err = p.lim.Reserve(ctx, key, req.N, req.MaxDelay)
	case viaBoundTake:
		d, err = p.b.Take(ctx, key, req.N)
	case viaLimiterApply:
		return p.lim.Apply(ctx, key, req, each)
	default:
		return p.b.Apply(ctx, key, req, each)
	}
	return floodgate.Result{Decision: d}, err
}

// same reports whether got, returned by route r, is want: the whole Result
// for the routes that return one, else its Decision.
func same(r route, want, got floodgate.Result) bool {
	if r.full() {
		return SameResult(want, got)
	}
	return want.Decision == got.Decision
}

// show formats what route r returned.
func show(r route, res floodgate.Result) string {
	if r.full() {
		return fmt.Sprintf("%+v", res)
	}
	return fmt.Sprintf("%+v", res.Decision)
}

// opString formats a request for messages, its instant relative to base.
func opString(req floodgate.Request, base time.Time) string {
	if req.Check {
		req.Check = false
		return "check " + opString(req, base)
	}
	switch req.Op {
	case floodgate.OpTake:
		if req.MaxDelay == 0 {
			return fmt.Sprintf("take(%d)", req.N)
		}
		return fmt.Sprintf("reserve(%d, %v)", req.N, req.MaxDelay)
	case floodgate.OpTakeUpTo:
		return fmt.Sprintf("upTo(%d)", req.N)
	case floodgate.OpSettle:
		return fmt.Sprintf("settle(%+d, t0%+v)", req.N, req.At.Sub(base))
	}
	return fmt.Sprintf("Op(%d)(%d)", req.Op, req.N)
}

func take(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTake, N: n} }
func reserve(n int64, maxDelay time.Duration) floodgate.Request {
	return floodgate.Request{Op: floodgate.OpTake, N: n, MaxDelay: maxDelay}
}
func upTo(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTakeUpTo, N: n} }

// checkDecision reports what is wrong with d, a decision of a limiter with
// policy p, whatever the instant: the invariants of floodgate.Decision.
func checkDecision(p floodgate.Policy, d floodgate.Decision) error {
	switch {
	case d.Limit != p.Quota:
		return fmt.Errorf("its Limit is %d, want the quota %d", d.Limit, p.Quota)
	case d.Remaining < 0 || d.Remaining > d.Limit:
		return fmt.Errorf("its Remaining is %d, want 0 to Limit %d", d.Remaining, d.Limit)
	case d.Delay < 0 || d.ResetAfter < 0 || d.RetryAfter < 0:
		return fmt.Errorf("a negative duration in %+v", d)
	case d.Allowed && d.RetryAfter != 0:
		return fmt.Errorf("an admission with a RetryAfter of %v, want 0", d.RetryAfter)
	case !d.Allowed && d.RetryAfter <= 0:
		return fmt.Errorf("a denial with a RetryAfter of %v, want > 0", d.RetryAfter)
	case !d.Allowed && d.Delay != 0:
		return fmt.Errorf("a denial with a Delay of %v, want 0", d.Delay)
	}
	return nil
}

// withTimeout runs f and fails t if it has not returned within d: a
// store's call must not hang. f must not call t.Fatal.
func withTimeout(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s has not returned after %v", what, d)
	}
}
