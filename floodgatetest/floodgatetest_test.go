package floodgatetest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// TestRefStore runs the harness on the example's store.
func TestRefStore(t *testing.T) {
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newRefStore(now)
	})
}

// mutants are stores with one bug each, and the subtest of Run that must
// catch it.
var mutants = map[string]struct {
	newStore func(now func() time.Time) floodgate.Store
	caughtBy string
}{
	// A state per configuration rather than per (key, kind): the bug
	// memstore had, which gives a deploy that changes a limit a fresh
	// quota on every key.
	"perConfiguration": {func(now func() time.Time) floodgate.Store { return perConfiguration{now} }, "StateIdentity"},
	// A Take that decides otherwise than Apply: it takes one unit
	// whatever n.
	"takeIgnoresN": {func(now func() time.Time) floodgate.Store { return takeIgnoresN{newRefStore(now)} }, "Reference"},
	// A refund that gives nothing back.
	"refundsNothing": {func(now func() time.Time) floodgate.Store { return refundsNothing{newRefStore(now)} }, "OwnClock"},
	// A Close after which the store goes on deciding.
	"closeIgnored": {func(now func() time.Time) floodgate.Store { return closeIgnored{newRefStore(now)} }, "Close"},
}

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
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store { return m.newStore(now) })
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

func (s perConfiguration) Bind(alg floodgate.Algorithm) (floodgate.Bound, error) {
	return newRefStore(s.now).Bind(alg)
}

type takeIgnoresN struct{ *refStore }

func (s takeIgnoresN) Bind(alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.refStore.Bind(alg)
	return takeOne{b}, err
}

type takeOne struct{ floodgate.Bound }

func (b takeOne) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	return b.Bound.Take(ctx, key, 1)
}

type refundsNothing struct{ *refStore }

func (s refundsNothing) Bind(alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.refStore.Bind(alg)
	return noRefund{b, s.refStore, alg}, err
}

type noRefund struct {
	floodgate.Bound
	s   *refStore
	alg floodgate.Algorithm
}

func (b noRefund) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if req.Op == floodgate.OpSettle {
		return floodgate.Result{At: b.s.now(), Decision: floodgate.Decision{Limit: b.alg.Policy().Quota}}, nil
	}
	return b.Bound.Apply(ctx, key, req)
}

type closeIgnored struct{ *refStore }

func (closeIgnored) Close() error { return nil }
