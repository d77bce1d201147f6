package rls

import (
	"context"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// undoStore records, for every take, whether it asked UndoLate.
type undoStore struct {
	floodgate.Store
	mu    sync.Mutex
	takes []bool
}

func (u *undoStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := u.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return undoBound{b, u}, nil
}

type undoBound struct {
	floodgate.Bound
	u *undoStore
}

func (b undoBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if req.Op == floodgate.OpTake && !req.Check {
		b.u.mu.Lock()
		b.u.takes = append(b.u.takes, req.UndoLate)
		b.u.mu.Unlock()
	}
	return b.Bound.Apply(ctx, key, req, each)
}

// TestTakesAskUndoLate: a descriptor's take asks the store to give back
// what it took if it fails for the service and is made all the same,
// unless a failed descriptor counts as within its limit (FailOpen): then
// a take made late counts, as the request was let through.
func TestTakesAskUndoLate(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 100}
`
	for _, policy := range []StoreErrorPolicy{FailOpen, FailClosed, FailError} {
		for _, coalesce := range []bool{false, true} {
			ms, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			u := &undoStore{Store: ms}
			svc := newService(t, u, nil, yml, &Options{OnStoreError: policy, Coalesce: coalesce, Parallel: true})
			call(t, svc, request("d", desc("user=a"), desc("route=/")))
			u.mu.Lock()
			if len(u.takes) != 2 {
				t.Fatalf("policy %d, coalesce %v: %d takes, want 2", policy, coalesce, len(u.takes))
			}
			for i, undo := range u.takes {
				if want := policy != FailOpen; undo != want {
					t.Errorf("policy %d, coalesce %v: take %d asked UndoLate=%v, want %v", policy, coalesce, i, undo, want)
				}
			}
			u.mu.Unlock()
		}
	}
}
