package floodgatetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// TestRefStore runs the harness on the example's store.
func TestRefStore(t *testing.T) {
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newRefStore(now)
	}, nil)
}

// mutants are stores with one bug each, and the subtest of Run that must
// catch it.
var mutants = map[string]struct {
	newStore func(now func() time.Time) floodgate.Store
	caughtBy string
	opts     *floodgatetest.Options
}{
	// A state per configuration rather than per (name, key, kind): the
	// bug memstore had, which gives a deploy that changes a limit a fresh
	// quota on every key.
	"perConfiguration": {func(now func() time.Time) floodgate.Store { return perConfiguration{now} }, "StateIdentity", nil},
	// A state per (key, kind) whatever the name: the bug every store had,
	// which makes two limiters keyed by the same user share a quota.
	"ignoresName": {func(now func() time.Time) floodgate.Store { return ignoresName{newRefStore(now)} }, "StateIdentity", nil},
	// A Take that decides otherwise than Apply: it takes one unit
	// whatever n.
	"takeIgnoresN": {func(now func() time.Time) floodgate.Store { return takeIgnoresN{newRefStore(now)} }, "Reference", nil},
	// A refund that gives nothing back.
	"refundsNothing": {func(now func() time.Time) floodgate.Store { return refundsNothing{newRefStore(now)} }, "OwnClock", nil},
	// A Close after which the store goes on deciding.
	"closeIgnored": {func(now func() time.Time) floodgate.Store { return closeIgnored{newRefStore(now)} }, "Close", nil},
	// A wrapper that admits the first denied take of every key: one unit
	// over the reference, which the conservative tier forbids.
	"admitsOneMore": {func(now func() time.Time) floodgate.Store { return &admitsOneMore{refStore: newRefStore(now)} }, "NeverOver", conservative},
	// A wrapper that denies a take once half the quota is spent: more
	// under-admission than the bound it states (none).
	"deniesHalf": {func(now func() time.Time) floodgate.Store { return deniesHalf{newRefStore(now)} }, "UnderAdmission", conservative},
}

// conservative runs the conservative cases.
var conservative = &floodgatetest.Options{Conservative: true}

// mutantEnv names the mutant TestMutant runs.
const mutantEnv = "FLOODGATETEST_MUTANT"

// TestMutant runs the harness on the mutant named by FLOODGATETEST_MUTANT:
// TestMutants runs it in a child process and expects it to fail.
func TestMutant(t *testing.T) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		t.Skip("TestMutants runs this test on each mutant store, in a child process")
	}
	m := mutants[name]
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store { return m.newStore(now) }, m.opts)
}

// TestMutants checks that Run catches each mutant's bug, in the subtest
// that is meant to.
func TestMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		t.Skip("in a mutant's process")
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutant$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("Run passed a store with the bug %q:\n%s", name, out)
			}
			if want := "--- FAIL: TestMutant/" + m.caughtBy; !strings.Contains(string(out), want) {
				t.Fatalf("Run did not fail in %s on the store with the bug %q:\n%s", m.caughtBy, name, out)
			}
		})
	}
}

// perConfiguration keeps a state per configuration.
type perConfiguration struct{ now func() time.Time }

func (s perConfiguration) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	return newRefStore(s.now).Bind(name, alg)
}

// ignoresName keeps one state per key and kind for every name.
type ignoresName struct{ *refStore }

func (s ignoresName) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	return s.refStore.Bind("one", alg)
}

type takeIgnoresN struct{ *refStore }

func (s takeIgnoresN) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.refStore.Bind(name, alg)
	return takeOne{b}, err
}

type takeOne struct{ floodgate.Bound }

func (b takeOne) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	return b.Bound.Take(ctx, key, 1)
}

type refundsNothing struct{ *refStore }

func (s refundsNothing) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.refStore.Bind(name, alg)
	return noRefund{b, s.refStore, alg}, err
}

type noRefund struct {
	floodgate.Bound
	s   *refStore
	alg floodgate.Algorithm
}

func (b noRefund) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if req.Op == floodgate.OpSettle {
		return floodgate.Result{At: b.s.now(), Decision: floodgate.Decision{Limit: b.alg.Policy().Quota}}, nil
	}
	return b.Bound.Apply(ctx, key, req, each)
}

type closeIgnored struct{ *refStore }

func (closeIgnored) Close() error { return nil }

// TestRefStoreConservative runs the conservative cases on the example's
// store, an exact one: an exact store is in the conservative tier too.
func TestRefStoreConservative(t *testing.T) {
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newRefStore(now)
	}, &floodgatetest.Options{Conservative: true})
}

// admitsOneMore admits the first denied take of each key.
type admitsOneMore struct {
	*refStore
	mu     sync.Mutex
	forgot map[string]bool
}

func (s *admitsOneMore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.refStore.Bind(name, alg)
	return oneMore{b, s}, err
}

type oneMore struct {
	floodgate.Bound
	s *admitsOneMore
}

func (b oneMore) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	d, err := b.Bound.Take(ctx, key, n)
	if err != nil || d.Allowed {
		return d, err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.forgot == nil {
		b.s.forgot = map[string]bool{}
	}
	if !b.s.forgot[key] {
		b.s.forgot[key] = true
		return floodgate.Decision{Allowed: true, Limit: d.Limit}, nil
	}
	return d, nil
}

// deniesHalf denies every take once half the quota is spent.
type deniesHalf struct{ *refStore }

func (s deniesHalf) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.refStore.Bind(name, alg)
	return half{b}, err
}

type half struct{ floodgate.Bound }

func (b half) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	d, err := b.Bound.Take(ctx, key, n)
	if err == nil && d.Allowed && d.Remaining < d.Limit/2 {
		// Deny what the reference admitted (and keep it spent: a denial
		// that changes state is no worse for this mutant's purpose).
		return floodgate.Decision{Limit: d.Limit, Remaining: d.Remaining, RetryAfter: time.Second, ResetAfter: d.ResetAfter}, nil
	}
	return d, err
}
