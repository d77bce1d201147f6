package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
)

// use is n units admitted at the instant at (ns).
type use struct{ at, n int64 }

// boundAlgorithms are small quotas over short windows, so that random
// traces cross many windows and run out of quota often.
var boundAlgorithms = []floodgate.Algorithm{
	floodgate.TokenBucket{Rate: 20, Per: time.Second, Burst: 20},
	floodgate.FixedWindow{Limit: 20, Window: time.Second},
	floodgate.SlidingWindow{Limit: 20, Window: time.Second},
	floodgate.SlidingLog{Limit: 20, Window: time.Second},
}

const (
	boundNodes    = 3
	boundMaxBatch = 6
)

// TestBoundRandomTraces runs random traces of decisions through three lease
// Stores (three processes) sharing one remote quota, on the virtual
// clock, and checks the instants at which units were used against each
// algorithm's bound: exactly the remote algorithm's for the fixed and
// sliding windows; the remote's plus the units the pools can hold for the
// token bucket and the sliding log (see the package doc).
func TestBoundRandomTraces(t *testing.T) {
	seeds := uint64(16)
	if testing.Short() {
		seeds = 4
	}
	for _, alg := range boundAlgorithms {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%v/seed%d", alg, seed), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) { runBoundTrace(t, alg, seed) })
			})
		}
	}
}

func runBoundTrace(t *testing.T, alg floodgate.Algorithm, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	store, err := memstore.New(nil)
	require.NoError(t, err)
	var remotes []*remote
	var nodes []leased
	for range boundNodes {
		r := wrap(store, alg)
		remotes = append(remotes, r)
		nodes = append(nodes, newLease(t, r, &lease.Options{
			MinBatch: 1, MaxBatch: boundMaxBatch,
			TTL:            time.Duration(200+rng.IntN(1800)) * ms,
			TargetInterval: time.Duration(10+rng.IntN(200)) * ms,
		}))
	}
	var (
		mu   sync.Mutex
		uses []use
	)
	record := func(n int64) {
		mu.Lock()
		uses = append(uses, use{at: time.Now().UnixNano(), n: n})
		mu.Unlock()
	}
	// A few goroutines per node, each making random decisions at random
	// instants for 20 s, some far above the quota and some below it (so
	// that pools hold units when windows end); the virtual clock moves
	// only when all of them sleep, so the instants recorded are the
	// decisions' own.
	var wg sync.WaitGroup
	var errs atomic.Int64
	end := time.Now().Add(10 * time.Second)
	for i, node := range nodes {
		for g := range 3 {
			grng := rand.New(rand.NewPCG(seed, uint64(10*i+g)))
			maxGap := []int{20, 400, 1000, 1500}[grng.IntN(4)] * 1000 // µs
			wg.Go(func() {
				ctx := context.Background()
				for time.Now().Before(end) {
					time.Sleep(time.Duration(grng.IntN(maxGap)) * time.Microsecond)
					n := int64(1 + grng.IntN(2))
					var d floodgate.Decision
					var err error
					switch grng.IntN(10) {
					case 0:
						d, err = node.AllowN(ctx, "k", boundMaxBatch+1) // forwarded
						n = boundMaxBatch + 1
					default:
						d, err = node.AllowN(ctx, "k", n)
					}
					if err != nil {
						errs.Add(1)
						continue
					}
					if d.Allowed {
						record(n)
					}
				}
			})
		}
	}
	wg.Wait()
	require.Zero(t, errs.Load())
	for _, n := range nodes {
		require.NoError(t, n.Close())
	}

	// Counts: no unit is admitted that the remote did not admit (minus
	// what it took back).
	var used, granted, refunded, forwarded int64
	for _, u := range uses {
		used += u.n
	}
	for _, r := range remotes {
		granted += r.granted.Load()
		refunded += r.refunded.Load()
	}
	for _, n := range nodes {
		forwarded += n.Stats().Forwarded
	}
	require.Positive(t, used)
	assert.LessOrEqual(t, used, granted-refunded+forwarded*(boundMaxBatch+1),
		"used %d, leased %d, refunded %d", used, granted, refunded)

	held := int64(boundNodes * boundMaxBatch) // the most the pools hold at once
	switch a := alg.(type) {
	case floodgate.FixedWindow:
		checkFixedWindow(t, a, uses)
	case floodgate.SlidingWindow:
		checkSlidingWindow(t, a, uses)
	case floodgate.SlidingLog:
		checkSlidingLog(t, a, uses, held)
	case floodgate.TokenBucket:
		checkTokenBucket(t, a, uses, held)
	}
}

// checkFixedWindow: at most Limit units used in each window.
func checkFixedWindow(t *testing.T, a floodgate.FixedWindow, uses []use) {
	t.Helper()
	per := map[int64]int64{}
	for _, u := range uses {
		per[u.at/int64(a.Window)] += u.n
	}
	for w, n := range per {
		assert.LessOrEqual(t, n, a.Limit, "window %d", w)
	}
}

// checkSlidingWindow: after every use, the sliding counter's estimate over
// the units as used, computed as the algorithm computes it, is at most
// Limit: every use is one the remote algorithm itself admits.
func checkSlidingWindow(t *testing.T, a floodgate.SlidingWindow, uses []use) {
	t.Helper()
	w := int64(a.Window)
	count := map[int64]int64{} // units used per window so far
	for i, u := range uses {
		k := u.at / w
		count[k] += u.n
		// Count every use at the same instant before checking.
		if i+1 < len(uses) && uses[i+1].at == u.at {
			continue
		}
		e := u.at - k*w
		avail := float64(a.Limit-count[k]) - float64(count[k-1])*float64(w-e)/float64(w)
		assert.GreaterOrEqual(t, avail, 0.0, "at %v: prev %d, curr %d", time.Duration(u.at%(100*w)), count[k-1], count[k])
	}
}

// checkSlidingLog: any window (t−W, t] holds at most Limit + held units.
func checkSlidingLog(t *testing.T, a floodgate.SlidingLog, uses []use, held int64) {
	t.Helper()
	w := int64(a.Window)
	first, sum := 0, int64(0)
	for _, u := range uses {
		sum += u.n
		for uses[first].at <= u.at-w {
			sum -= uses[first].n
			first++
		}
		assert.LessOrEqual(t, sum, a.Limit+held, "window ending at %v", time.Duration(u.at%(100*w)))
	}
}

// checkTokenBucket: any interval [s, t] holds at most Burst + Rate·(t−s)
// (rounded up) + held units.
func checkTokenBucket(t *testing.T, a floodgate.TokenBucket, uses []use, held int64) {
	t.Helper()
	interval := (int64(a.Per) + a.Rate - 1) / a.Rate
	for i := range uses {
		sum := int64(0)
		for j := i; j < len(uses); j++ {
			sum += uses[j].n
			d := uses[j].at - uses[i].at
			limit := a.Burst + (d+interval-1)/interval + held
			if sum > limit {
				assert.LessOrEqual(t, sum, limit, "[%v, %v]", time.Duration(uses[i].at), time.Duration(uses[j].at))
				return
			}
		}
	}
}
