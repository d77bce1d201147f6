package memstore_test

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// testName is the name of the tests' limiters and bindings: they share a
// key's state per kind, as limiters of one name do.
const testName = "test"

// testOpts names a test's limiter testName.
var testOpts = &floodgate.Options{Name: testName}

// applyOnce binds alg under testName and applies req for key: one step
// where a test has no Limiter.
func applyOnce(ctx context.Context, s *memstore.Store, key string, alg floodgate.Algorithm, req floodgate.Request) (floodgate.Result, error) {
	b, err := s.Bind(testName, alg)
	if err != nil {
		return floodgate.Result{}, err
	}
	return b.Apply(ctx, key, req, nil)
}
