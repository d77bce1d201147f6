package memstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
)

func newStore(t *testing.T, now func() time.Time) floodgate.Store {
	s, err := memstore.New(&memstore.Options{Now: now})
	require.NoError(t, err)
	return s
}

// TestConformance runs the store harness on memstore: on the harness's
// virtual clocks and on time.Now (a nil now).
func TestConformance(t *testing.T) { floodgatetest.Run(t, newStore, nil) }

// TestConformanceConservative runs the conservative cases on memstore,
// through one store three times (the goroutines of one process): an exact
// store is in the conservative tier too, with no under-admission.
func TestConformanceConservative(t *testing.T) {
	floodgatetest.Run(t, newStore, &floodgatetest.Options{
		Conservative: true,
		Fleet: func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
			s := newStore(t, now)
			ss := make([]floodgate.Store, n)
			for i := range ss {
				ss[i] = s
			}
			return ss
		},
	})
}
