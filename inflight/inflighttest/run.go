// Package inflighttest checks an inflight.Store against its contract, as
// floodgatetest checks a floodgate.Store: the authors of a store call
// [Run] from a test, and the stores floodgate ships (inflight.LocalStore,
// redisstore) run the same cases.
//
// A store's test hands Run a function that returns n stores sharing one
// fresh backend namespace, as n processes would see it:
//
//	func TestInflightConformance(t *testing.T) {
//		inflighttest.Run(t, func(t *testing.T, n int) []inflight.Store {
//			prefix := uniquePrefix(t)
//			stores := make([]inflight.Store, n)
//			for i := range stores {
//				stores[i] = newStoreOnItsOwnClient(t, prefix)
//			}
//			return stores
//		}, nil)
//	}
//
// An in-process store returns one store n times.
//
// # What Run checks
//
//   - Limit: a key admits exactly its limit, then denies with InFlight at
//     the limit and a zero Hold, and a Release admits one more.
//   - Keys: keys are independent.
//   - Release: a second Release of a Hold, or of its copy, frees nothing;
//     a Release on an ended context frees the slot; the zero Hold is no
//     hold; a Hold of another store is an error matching
//     inflight.ErrInvalidHold.
//   - Renew: a live hold renews; a released one does not.
//   - Names: the holds of a key under one name are apart from its holds
//     under every other (names that extend one another, that hold the
//     key, ':' or non-ASCII letters, of the longest length, and more names
//     than an in-process store lists before it indexes them), and shared
//     by the stores of one backend.
//   - LimitChange: Acquires of one name with different limits share the
//     key's holds, each denying at its own limit.
//   - Errors: bad keys, names and limits give floodgate's sentinels.
//   - Limiter: the Status of an inflight.Limiter on the store.
//   - LimiterNames: through Limiters on two stores of one backend,
//     limiters of different names (explicit, or derived from different
//     limits) keep a key's holds apart, limiters of one name share them
//     across stores, and a limit changed under an explicit name keeps the
//     holds while one changed under the default name starts without.
//   - Concurrent: 8 stores (8 clients of one backend) × 64 goroutines on
//     one key, holding for random times: the holders, counting themselves
//     between Acquire and Release, never exceed the limit, and once they
//     are done the key admits its limit again.
//   - Expiry, for stores whose holds expire: a hold never renewed frees
//     its slot after its TTL (within TTL + 1s), and cannot be renewed
//     after.
//   - Renewal, for stores whose holds expire: through a Limiter, a request
//     held 10 × TTL keeps its slot (another client is denied throughout),
//     and a request shorter than RenewEvery costs no renewal.
package inflighttest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
)

// Options configures Run. A nil *Options means the defaults; so does the
// zero value of each field.
type Options struct {
	// Rounds is the number of Acquires each goroutine of the Concurrent
	// case makes. The default is 16; a slow backend (an embedded
	// interpreter) may ask for fewer.
	Rounds int
	// TTL is the ttl of the Expiry and Renewal cases, which take about one
	// and 10 TTLs. The default is 500ms: renewals every third of it leave
	// two thirds for one that a loaded machine delays.
	TTL time.Duration
	// SkipRenewal skips the Renewal case, for a run that must stay short
	// on a backend whose tests run it elsewhere (an embedded miniredis
	// beside a real Redis in CI). The default is false.
	SkipRenewal bool
}

// Run runs the conformance cases against the stores newStores returns,
// each group of cases in a subtest (see the package doc).
//
// newStores is called once or more per subtest, from the subtest's
// goroutine, with n >= 1. Each call must return n stores that share one
// backend in which no key has holds: on a shared server, give the stores
// of every call a key prefix of its own (and delete its keys in a
// t.Cleanup). The n stores stand for n processes: for a server, give each
// its own client. Run closes none of them.
func Run(t *testing.T, newStores func(t *testing.T, n int) []inflight.Store, opts *Options) {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Rounds <= 0 {
		o.Rounds = 16
	}
	if o.TTL <= 0 {
		o.TTL = 500 * time.Millisecond
	}
	h := &harness{newStores: newStores, o: o}
	t.Run("Limit", h.runLimit)
	t.Run("Keys", h.runKeys)
	t.Run("Release", h.runRelease)
	t.Run("Renew", h.runRenew)
	t.Run("Names", h.runNames)
	t.Run("LimitChange", h.runLimitChange)
	t.Run("Errors", h.runErrors)
	t.Run("Limiter", h.runLimiter)
	t.Run("LimiterNames", h.runLimiterNames)
	t.Run("Concurrent", h.runConcurrent)
	t.Run("Expiry", h.runExpiry)
	t.Run("Renewal", func(t *testing.T) {
		if h.o.SkipRenewal {
			t.Skip("skipped: Options.SkipRenewal")
		}
		h.runRenewal(t)
	})
}

type harness struct {
	newStores func(t *testing.T, n int) []inflight.Store
	o         Options
}

func (h *harness) store(t *testing.T) inflight.Store {
	t.Helper()
	return h.newStores(t, 1)[0]
}

// ttl is the ttl of the cases that do not wait for it: long enough that no
// hold expires while they run.
const ttl = time.Minute

// name is the limiter name of the harness's direct calls to a store,
// where a case does not say otherwise.
const name = "inflighttest"

func acquire(t *testing.T, s inflight.Store, key string, limit int64) inflight.Result {
	t.Helper()
	return acquireAs(t, s, name, key, limit)
}

func acquireAs(t *testing.T, s inflight.Store, name, key string, limit int64) inflight.Result {
	t.Helper()
	res, err := s.Acquire(context.Background(), name, key, limit, ttl)
	if err != nil {
		t.Fatalf("Acquire(%.20q, %q, %d) = %v", name, key, limit, err)
	}
	return res
}

// mustAdmit acquires a slot of key, expecting InFlight to be want.
func mustAdmit(t *testing.T, s inflight.Store, key string, limit, want int64) inflight.Hold {
	t.Helper()
	return mustAdmitAs(t, s, name, key, limit, want)
}

func mustAdmitAs(t *testing.T, s inflight.Store, name, key string, limit, want int64) inflight.Hold {
	t.Helper()
	res := acquireAs(t, s, name, key, limit)
	if !res.Allowed || res.InFlight != want {
		t.Fatalf("Acquire(%.20q, %q, %d) = %+v, want Allowed with InFlight %d", name, key, limit, res, want)
	}
	return res.Hold
}

// mustDeny expects Acquire to deny key with InFlight want.
func mustDeny(t *testing.T, s inflight.Store, key string, limit, want int64) {
	t.Helper()
	mustDenyAs(t, s, name, key, limit, want)
}

func mustDenyAs(t *testing.T, s inflight.Store, name, key string, limit, want int64) {
	t.Helper()
	res := acquireAs(t, s, name, key, limit)
	if res.Allowed || res.InFlight != want || res.Hold != (inflight.Hold{}) {
		t.Fatalf("Acquire(%.20q, %q, %d) = %+v, want a denial with InFlight %d and no Hold", name, key, limit, res, want)
	}
}

func release(t *testing.T, s inflight.Store, key string, h inflight.Hold) {
	t.Helper()
	releaseAs(t, s, name, key, h)
}

func releaseAs(t *testing.T, s inflight.Store, name, key string, h inflight.Hold) {
	t.Helper()
	if err := s.Release(context.Background(), name, key, h); err != nil {
		t.Fatalf("Release(%.20q, %q, %+v) = %v", name, key, h, err)
	}
}

func (h *harness) runLimit(t *testing.T) {
	for _, limit := range []int64{1, 3} {
		s := h.store(t)
		var holds []inflight.Hold
		for i := int64(1); i <= limit; i++ {
			holds = append(holds, mustAdmit(t, s, "k", limit, i))
		}
		mustDeny(t, s, "k", limit, limit)
		mustDeny(t, s, "k", limit, limit) // a denial changes nothing
		release(t, s, "k", holds[0])
		mustAdmit(t, s, "k", limit, limit)
		mustDeny(t, s, "k", limit, limit)
	}
}

func (h *harness) runKeys(t *testing.T) {
	s := h.store(t)
	a := mustAdmit(t, s, "a", 1, 1)
	mustDeny(t, s, "a", 1, 1)
	b := mustAdmit(t, s, "b", 1, 1)
	long := strings.Repeat("x", floodgate.MaxKeyLen)
	mustAdmit(t, s, long, 1, 1)
	mustAdmit(t, s, "{a}", 1, 1) // braces are no hash tag of their own
	release(t, s, "a", a)
	mustDeny(t, s, "b", 1, 1)
	mustAdmit(t, s, "a", 1, 1)
	release(t, s, "b", b)
}

func (h *harness) runRelease(t *testing.T) {
	s := h.store(t)
	a := mustAdmit(t, s, "k", 2, 1)
	copied := a
	mustAdmit(t, s, "k", 2, 2)
	release(t, s, "k", a)
	release(t, s, "k", a)      // a second Release frees nothing
	release(t, s, "k", copied) // nor does a copy's
	mustAdmit(t, s, "k", 2, 2)
	mustDeny(t, s, "k", 2, 2)

	// A Release on an ended context still frees the slot.
	s = h.store(t)
	a = mustAdmit(t, s, "k", 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Release(ctx, name, "k", a); err != nil {
		t.Fatalf("Release on a cancelled context = %v, want nil", err)
	}
	b := mustAdmit(t, s, "k", 1, 1)

	release(t, s, "k", inflight.Hold{}) // the zero Hold is no hold
	mustDeny(t, s, "k", 1, 1)
	err := s.Release(context.Background(), name, "k", inflight.Hold{ID: b.ID, Ref: foreign{}, Expires: b.Expires})
	if !errors.Is(err, inflight.ErrInvalidHold) {
		t.Fatalf("Release of a foreign Hold = %v, want inflight.ErrInvalidHold", err)
	}
	mustDeny(t, s, "k", 1, 1)
	release(t, s, "k", b)
	mustAdmit(t, s, "k", 1, 1)
}

// foreign is the Ref of a Hold no store granted.
type foreign struct{}

func (h *harness) runRenew(t *testing.T) {
	s := h.store(t)
	a := mustAdmit(t, s, "k", 1, 1)
	ok, err := s.Renew(context.Background(), name, "k", a, ttl)
	if err != nil || !ok {
		t.Fatalf("Renew of a live hold = %v, %v, want true, nil", ok, err)
	}
	mustDeny(t, s, "k", 1, 1)
	release(t, s, "k", a)
	ok, err = s.Renew(context.Background(), name, "k", a, ttl)
	if err != nil || ok {
		t.Fatalf("Renew of a released hold = %v, %v, want false, nil", ok, err)
	}
	// The failed renewal took no slot.
	b := mustAdmit(t, s, "k", 1, 1)
	release(t, s, "k", b)
}

// names are names that a store must keep apart: some extend others, hold
// the key or a Redis key's separators, or are not ASCII; the longest
// floodgate.CheckName accepts; and enough for an in-process store to go
// past a short list.
func names() []string {
	ns := []string{
		"a", "ab", "a:b", "a:if", "a:L:tb0", "a:tb", "k", "k:", ":", "über", "日本",
		"inflight:1", "inflight:10",
		strings.Repeat("n", floodgate.MaxNameLen),
		strings.Repeat("n", floodgate.MaxNameLen-1) + "m",
	}
	for i := range 24 {
		ns = append(ns, "name"+strconv.Itoa(i))
	}
	return ns
}

func (h *harness) runNames(t *testing.T) {
	stores := h.newStores(t, 2)
	a, b := stores[0], stores[1]
	ns := names()
	holds := make([]inflight.Hold, len(ns))
	// One slot of "k" under each name: no name sees another's hold.
	for i, n := range ns {
		holds[i] = mustAdmitAs(t, a, n, "k", 1, 1)
	}
	// Each is shared by the other store of the backend, under its name
	// only.
	for _, n := range ns {
		mustDenyAs(t, b, n, "k", 1, 1)
	}
	// A name's holds are per key, as without names.
	other := mustAdmitAs(t, b, "a", "other", 1, 1)
	// A Release frees its name's slot, and no other name's.
	releaseAs(t, a, ns[0], "k", holds[0])
	mustAdmitAs(t, b, ns[0], "k", 1, 1)
	for _, n := range ns[1:] {
		mustDenyAs(t, b, n, "k", 1, 1)
	}
	for i, n := range ns[1:] {
		releaseAs(t, a, n, "k", holds[i+1])
	}
	for _, n := range ns[1:] {
		mustAdmitAs(t, b, n, "k", 2, 1)
	}
	releaseAs(t, b, "a", "other", other)
}

func (h *harness) runLimitChange(t *testing.T) {
	s := h.store(t)
	a := mustAdmit(t, s, "k", 3, 1)
	mustAdmit(t, s, "k", 3, 2)
	mustAdmit(t, s, "k", 3, 3)
	mustDeny(t, s, "k", 2, 3) // a lower limit sees the holds of the higher
	release(t, s, "k", a)
	mustDeny(t, s, "k", 2, 2)
	mustAdmit(t, s, "k", 3, 3)
	mustAdmit(t, s, "k", 4, 4) // a higher one admits on top of them
}

func (h *harness) runErrors(t *testing.T) {
	s := h.store(t)
	ctx := context.Background()
	for _, c := range []struct {
		key   string
		limit int64
		want  error
	}{
		{"", 1, floodgate.ErrEmptyKey},
		{strings.Repeat("x", floodgate.MaxKeyLen+1), 1, floodgate.ErrKeyTooLong},
		{"k", 0, floodgate.ErrInvalidConfig},
		{"k", -1, floodgate.ErrInvalidConfig},
	} {
		res, err := s.Acquire(ctx, name, c.key, c.limit, ttl)
		if !errors.Is(err, c.want) || res.Allowed {
			t.Errorf("Acquire(%.10q, %d) = %+v, %v, want an error matching %v", c.key, c.limit, res, err, c.want)
		}
	}
	for _, bad := range []string{"", "a{b", "a}", "{k}", "\xff", strings.Repeat("n", floodgate.MaxNameLen+1)} {
		res, err := s.Acquire(ctx, bad, "k", 1, ttl)
		if !errors.Is(err, floodgate.ErrInvalidConfig) || res.Allowed {
			t.Errorf("Acquire under the name %.20q = %+v, %v, want an error matching floodgate.ErrInvalidConfig", bad, res, err)
		}
	}
	// None of them took a slot.
	mustAdmit(t, s, "k", 1, 1)
}

func newLimiter(t *testing.T, s inflight.Store, limit int64, o *inflight.Options) *inflight.Limiter {
	t.Helper()
	l, err := inflight.New(s, limit, o)
	if err != nil {
		t.Fatalf("inflight.New(%d, %+v) = %v", limit, o, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (h *harness) runLimiter(t *testing.T) {
	s := h.store(t)
	l := newLimiter(t, s, 2, &inflight.Options{RetryAfter: 3 * time.Second})
	if got := l.Name(); got != "inflight:2" {
		t.Fatalf("Name() = %q, want the default inflight:2", got)
	}
	ctx := context.Background()
	a, err := l.Acquire(ctx, "k")
	if err != nil || a.Status != (inflight.Status{Allowed: true, Limit: 2, InFlight: 1}) {
		t.Fatalf("Acquire = %+v, %v, want Allowed, Limit 2, InFlight 1", a.Status, err)
	}
	b, _ := l.Acquire(ctx, "k")
	c, err := l.Acquire(ctx, "k")
	want := inflight.Status{Limit: 2, InFlight: 2, RetryAfter: 3 * time.Second}
	if err != nil || c.Status != want {
		t.Fatalf("Acquire = %+v, %v, want %+v", c.Status, err, want)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release of a denial = %v, want nil", err)
	}
	for _, s := range []inflight.Slot{a, a, b} {
		if err := s.Release(ctx); err != nil {
			t.Fatalf("Release = %v", err)
		}
	}
	if d, _ := l.Acquire(ctx, "k"); d.InFlight != 1 {
		t.Fatalf("Acquire after the Releases = %+v, want InFlight 1", d.Status)
	}
}

// limiterAcquire acquires a slot of key from l, expecting Allowed and
// InFlight as given.
func limiterAcquire(t *testing.T, l *inflight.Limiter, key string, allowed bool, inFlight int64) inflight.Slot {
	t.Helper()
	s, err := l.Acquire(context.Background(), key)
	if err != nil || s.Allowed != allowed || s.InFlight != inFlight {
		t.Fatalf("Acquire(%q) of %s (limit %d) = %+v, %v, want Allowed %v with InFlight %d", key, l.Name(), l.Limit(), s.Status, err, allowed, inFlight)
	}
	return s
}

func (h *harness) runLimiterNames(t *testing.T) {
	stores := h.newStores(t, 2)
	a, b := stores[0], stores[1]
	var held []inflight.Slot
	take := func(l *inflight.Limiter, key string, inFlight int64) {
		t.Helper()
		held = append(held, limiterAcquire(t, l, key, true, inFlight))
	}
	deny := func(l *inflight.Limiter, key string, inFlight int64) {
		t.Helper()
		limiterAcquire(t, l, key, false, inFlight)
	}

	// Two limiters for different purposes, keyed alike: their limits
	// differ, and so do their default names.
	search := newLimiter(t, a, 2, nil)
	upload := newLimiter(t, a, 1, nil)
	take(upload, "user:1", 1)
	deny(upload, "user:1", 1)
	take(search, "user:1", 1)
	take(search, "user:1", 2)
	deny(search, "user:1", 2)
	// The processes of a fleet, built alike, share: the same default
	// name on another store of the backend.
	deny(newLimiter(t, b, 1, nil), "user:1", 1)
	deny(newLimiter(t, b, 2, nil), "user:1", 2)

	// Equal limits under explicit names keep apart; each name is shared
	// across stores.
	exports := newLimiter(t, a, 1, &inflight.Options{Name: "exports"})
	imports := newLimiter(t, a, 1, &inflight.Options{Name: "imports"})
	take(exports, "user:1", 1)
	take(imports, "user:1", 1)
	deny(newLimiter(t, b, 1, &inflight.Options{Name: "exports"}), "user:1", 1)
	// A name is a name however it was given: an explicit "inflight:1" is
	// upload's default one, and shares its holds.
	deny(newLimiter(t, b, 1, &inflight.Options{Name: "inflight:1"}), "user:1", 1)

	// A limit changed under an explicit name keeps the key's holds: the
	// new processes count the old ones' requests.
	old := newLimiter(t, a, 2, &inflight.Options{Name: "deploy"})
	take(old, "user:1", 1)
	take(old, "user:1", 2)
	raised := newLimiter(t, b, 3, &inflight.Options{Name: "deploy"})
	take(raised, "user:1", 3)
	deny(raised, "user:1", 3)
	lowered := newLimiter(t, b, 1, &inflight.Options{Name: "deploy"})
	deny(lowered, "user:1", 3) // InFlight above the new Limit until they end
	// Under the default name, the new limit is a new name: no holds.
	take(newLimiter(t, b, 3, nil), "user:1", 1)

	for _, s := range held {
		if err := s.Release(context.Background()); err != nil {
			t.Fatalf("Release = %v", err)
		}
	}
	take(search, "user:1", 1)
	take(upload, "user:1", 1)
	take(lowered, "user:1", 1)
	for _, s := range held[len(held)-3:] {
		_ = s.Release(context.Background())
	}
}

// The Concurrent case's shape: the bar of issue 15.
const (
	clients    = 8
	perClient  = 64
	concurrent = 5 // the limit
)

func (h *harness) runConcurrent(t *testing.T) {
	stores := h.newStores(t, clients)
	if len(stores) != clients {
		t.Fatalf("newStores(%d) returned %d stores", clients, len(stores))
	}
	lims := make([]*inflight.Limiter, clients)
	for i, s := range stores {
		lims[i] = newLimiter(t, s, concurrent, nil)
	}
	var (
		wg              sync.WaitGroup
		holding, peak   atomic.Int64
		admitted, fails atomic.Int64
		firstErr        atomic.Pointer[error]
	)
	for c := range clients {
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), uint64(g)))
				for range h.o.Rounds {
					slot, err := lims[c].Acquire(context.Background(), "k")
					if err != nil {
						fails.Add(1)
						firstErr.CompareAndSwap(nil, &err)
						continue
					}
					if !slot.Allowed {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
						continue
					}
					n := holding.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					admitted.Add(1)
					time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
					holding.Add(-1)
					if err := slot.Release(context.Background()); err != nil {
						fails.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
				}
			}()
		}
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		t.Fatalf("%d calls failed, the first with %v", fails.Load(), *p)
	}
	if p := peak.Load(); p > concurrent {
		t.Fatalf("%d holders at once, limit %d", p, concurrent)
	}
	if admitted.Load() < concurrent {
		t.Fatalf("%d admissions, want at least the limit %d", admitted.Load(), concurrent)
	}
	t.Logf("%d admissions by %d goroutines on %d clients; at most %d at once (limit %d)", admitted.Load(), clients*perClient, clients, peak.Load(), concurrent)
	// Every slot came back.
	n := lims[0].Name()
	for i := int64(1); i <= concurrent; i++ {
		mustAdmitAs(t, stores[int(i)%clients], n, "k", concurrent, i)
	}
	mustDenyAs(t, stores[0], n, "k", concurrent, concurrent)
}

// expiring reports whether the holds of the stores expire, skipping t
// otherwise.
func expiring(t *testing.T, s inflight.Store) {
	t.Helper()
	res := acquire(t, s, "probe", 1)
	release(t, s, "probe", res.Hold)
	if !res.Hold.Expires {
		t.Skip("the holds of this store do not expire")
	}
}

func (h *harness) runExpiry(t *testing.T) {
	stores := h.newStores(t, 2)
	a, b := stores[0], stores[1]
	expiring(t, a)
	ctx := context.Background()
	ttl := h.o.TTL
	res, err := a.Acquire(ctx, name, "k", 1, ttl)
	if err != nil || !res.Allowed {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	start := time.Now()
	for {
		got, err := b.Acquire(ctx, name, "k", 1, ttl)
		if err != nil {
			t.Fatalf("Acquire = %v", err)
		}
		if got.Allowed {
			break
		}
		if time.Since(start) > ttl+time.Second {
			t.Fatalf("a hold never renewed still holds its slot %v after its Acquire, TTL %v", time.Since(start), ttl)
		}
		time.Sleep(ttl / 20)
	}
	freed := time.Since(start)
	// Redis expires on its own clock, which runs with ours; a generous
	// lower bound catches a hold that was never counted.
	if freed < ttl/2 {
		t.Fatalf("the slot freed %v after its Acquire, before half its TTL %v", freed, ttl)
	}
	t.Logf("freed %v after its Acquire, TTL %v", freed, ttl)
	// The expired hold cannot come back: its slot is someone else's.
	ok, err := a.Renew(ctx, name, "k", res.Hold, ttl)
	if err != nil || ok {
		t.Fatalf("Renew of an expired hold = %v, %v, want false, nil", ok, err)
	}
	mustDeny(t, b, "k", 1, 1)
	release(t, a, "k", res.Hold) // frees nothing: the slot is b's
	mustDeny(t, b, "k", 1, 1)
}

// counting counts a Store's renewals.
type counting struct {
	inflight.Store
	renewals atomic.Int64
}

func (c *counting) Renew(ctx context.Context, name, key string, h inflight.Hold, ttl time.Duration) (bool, error) {
	c.renewals.Add(1)
	return c.Store.Renew(ctx, name, key, h, ttl)
}

func (h *harness) runRenewal(t *testing.T) {
	stores := h.newStores(t, 2)
	expiring(t, stores[0])
	ctx := context.Background()
	ttl := h.o.TTL
	c := &counting{Store: stores[0]}
	holder := newLimiter(t, c, 1, &inflight.Options{TTL: ttl})
	other := newLimiter(t, stores[1], 1, &inflight.Options{TTL: ttl})

	// A request shorter than RenewEvery (TTL/3) costs no renewal, even
	// once its renewal would have been due. A loaded machine may oversleep
	// past RenewEvery, which proves nothing: then it tries again.
	for try := 0; ; try++ {
		short, err := holder.Acquire(ctx, "short")
		if err != nil || !short.Allowed {
			t.Fatalf("Acquire = %+v, %v", short.Status, err)
		}
		start := time.Now()
		time.Sleep(ttl / 6)
		held := time.Since(start)
		if err := short.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 2)
		n := c.renewals.Swap(0)
		if held < ttl/3-ttl/30 {
			if n != 0 {
				t.Fatalf("a request of %v cost %d renewals, RenewEvery %v", held, n, ttl/3)
			}
			break
		}
		if try == 2 {
			t.Fatalf("could not hold a slot for less than RenewEvery in 3 tries (the last %v)", held)
		}
	}

	slot, err := holder.Acquire(ctx, "k")
	if err != nil || !slot.Allowed {
		t.Fatalf("Acquire = %+v, %v", slot.Status, err)
	}
	start := time.Now()
	denials := 0
	for time.Since(start) < 10*ttl {
		d, err := other.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("Acquire = %v", err)
		}
		if d.Allowed {
			t.Fatalf("another client took the slot %v into a request renewed for it (TTL %v)", time.Since(start), ttl)
		}
		denials++
		time.Sleep(ttl / 10)
	}
	if err := slot.Release(ctx); err != nil {
		t.Fatal(err)
	}
	renewals := c.renewals.Load()
	// About 10 × 3 renewals: at least a third of them, not one per
	// denial.
	if renewals < 10 || renewals > 60 {
		t.Fatalf("%d renewals in %v, RenewEvery %v", renewals, 10*ttl, ttl/3)
	}
	d, err := other.Acquire(ctx, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire after the Release = %+v, %v, want Allowed", d.Status, err)
	}
	_ = d.Release(ctx)
	t.Logf("held %v (TTL %v) with %d renewals; %d acquisitions by another client denied", 10*ttl, ttl, renewals, denials)
	_ = holder.Close()
	if n := c.renewals.Load(); n != renewals {
		t.Fatalf("%d renewals after the Release, want none", n-renewals)
	}
}
