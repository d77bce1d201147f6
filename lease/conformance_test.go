package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// conformanceMaxBatch is the MaxBatch of the conformance stores: small, so
// that the pools of a fleet hold a fraction of the quotas the cases use.
const conformanceMaxBatch = 4

// TestConformance runs floodgatetest's conservative tier on lease Stores
// over one memstore, as the processes of a fleet over one Redis: the fixed
// and sliding windows never admit what the reference would deny, and
// under-admit at most the units the pools hold (MaxBatch per store). The
// token bucket and the sliding log are outside the tier (see the package
// doc), and the leaky bucket and Limits are refused at Bind.
//
// The stores are handed to Run without their Close (see unclosed), and
// closed at the end of each subtest: Run's "Close" case binds all five
// algorithms, the leaky bucket included, and fails on a store that refuses
// one at Bind, which its conservative cases allow. TestClosedStepsFail
// checks Close instead, on the four algorithms a lease binds.
func TestConformance(t *testing.T) {
	opts := func(now func() time.Time) *lease.Options {
		return &lease.Options{MaxBatch: conformanceMaxBatch, Now: now, Timeout: 10 * time.Second}
	}
	newRemote := func(t *testing.T, now func() time.Time) floodgate.Store {
		t.Helper()
		var mo *memstore.Options
		if now != nil {
			mo = &memstore.Options{Now: now}
		}
		s, err := memstore.New(mo)
		require.NoError(t, err)
		return s
	}
	newLease := func(t *testing.T, remote floodgate.Store, now func() time.Time) floodgate.Store {
		t.Helper()
		s, err := lease.New(remote, opts(now))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return unclosed{s}
	}
	floodgatetest.Run(t, func(t *testing.T, now func() time.Time) floodgate.Store {
		return newLease(t, newRemote(t, now), now)
	}, &floodgatetest.Options{
		Conservative: true,
		Fleet: func(t *testing.T, now func() time.Time, n int) []floodgate.Store {
			remote := newRemote(t, now)
			ss := make([]floodgate.Store, n)
			for i := range ss {
				ss[i] = newLease(t, remote, now)
			}
			return ss
		},
		UnderAdmission: func(_ floodgate.Algorithm, n int) int64 { return int64(n) * conformanceMaxBatch },
		Skip: func(alg floodgate.Algorithm) string {
			switch k, _ := step.KindOf(alg); k {
			case step.KindTokenBucket, step.KindSlidingLog:
				return "not in the conservative tier: in any interval it may admit, beyond the algorithm's bound, the units held in pools at its start"
			}
			return ""
		},
	})
}

// unclosed is a Store without its Close method, so that floodgatetest.Run
// does not run its Close case on it (see TestConformance).
type unclosed struct{ floodgate.Store }
