package memstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"github.com/floodgate-go/floodgate/memstore"
)

func newStore(t *testing.T, now func() time.Time) floodgate.Store {
	s, err := memstore.New(&memstore.Options{Now: now})
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) { conformance.Run(t, newStore) }
