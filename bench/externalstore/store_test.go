package externalstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bench/externalstore"
	"github.com/floodgate-go/floodgate/floodgatetest"
)

// TestConformance runs floodgate's store harness on a store from another
// module: what every third-party store's test does.
func TestConformance(t *testing.T) {
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return externalstore.New(now)
	}, nil)
}
