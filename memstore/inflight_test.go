package memstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/inflight/inflighttest"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestInflightConformance runs the in-flight store harness on memstore:
// the n clients of one process are one store.
func TestInflightConformance(t *testing.T) {
	inflighttest.Run(t, func(t *testing.T, n int) []inflight.Store {
		s, err := memstore.New(nil)
		require.NoError(t, err)
		stores := make([]inflight.Store, n)
		for i := range stores {
			stores[i] = s
		}
		return stores
	}, nil)
}

// TestInflightZeroAllocs: Acquire and Release of a key in use allocate
// nothing, on the store and through a Limiter.
func TestInflightZeroAllocs(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	ctx := context.Background()
	lim, err := inflight.New(s, 4, nil)
	require.NoError(t, err)
	defer lim.Close()
	warm, err := lim.Acquire(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	allocs := testing.AllocsPerRun(1000, func() {
		slot, err := lim.Acquire(ctx, "k")
		if err != nil || !slot.Allowed {
			t.Fatalf("Acquire = %+v, %v", slot.Decision, err)
		}
		_ = slot.Release(ctx)
	})
	require.Zero(t, allocs, "Limiter.Acquire+Release allocations")
	allocs = testing.AllocsPerRun(1000, func() {
		res, _ := s.Acquire(ctx, "k", 4, 0)
		_ = s.Release(ctx, "k", res.Hold)
	})
	require.Zero(t, allocs, "Store.Acquire+Release allocations")
	allocs = testing.AllocsPerRun(1000, func() {
		_, _ = s.Acquire(ctx, "full", 0+1, 0)
	})
	require.Zero(t, allocs, "Store.Acquire denial allocations")
}

// TestInflightReclaim: keys without requests in flight are reclaimed; a
// key with one is never evicted, not even past MaxKeys, since forgetting
// it would admit more than its limit.
func TestInflightReclaim(t *testing.T) {
	s, err := memstore.New(&memstore.Options{MaxKeys: 64, Shards: 1})
	require.NoError(t, err)
	ctx := context.Background()
	held := make([]inflight.Hold, 100)
	for i := range held {
		res, err := s.Acquire(ctx, "held"+strconv.Itoa(i), 1, 0)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		held[i] = res.Hold
	}
	// Past MaxKeys: key rotation through idle keys evicts idle keys only.
	for i := range 1000 {
		k := "idle" + strconv.Itoa(i)
		res, err := s.Acquire(ctx, k, 1, 0)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, k, res.Hold))
	}
	for i := range held {
		res, err := s.Acquire(ctx, "held"+strconv.Itoa(i), 1, 0)
		require.NoError(t, err)
		require.False(t, res.Allowed, "held%d was forgotten while held", i)
	}
	// An insertion evicts an idle key when its sample finds one, and
	// reclaims them all when its shard has doubled since the last sweep.
	require.LessOrEqual(t, s.Len(), 2*(len(held)+64), "entries")
	for i, h := range held {
		require.NoError(t, s.Release(ctx, "held"+strconv.Itoa(i), h))
	}
	s.Sweep()
	require.Zero(t, s.Len(), "entries after Sweep")
}

// TestInflightReclaimRace: Acquires racing Sweeps never lose a hold nor
// admit past the limit.
func TestInflightReclaimRace(t *testing.T) {
	s, err := memstore.New(&memstore.Options{Shards: 1})
	require.NoError(t, err)
	ctx := context.Background()
	const limit = 2
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held = map[string]int{}
		done = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
				s.Sweep()
			}
		}
	}()
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 2000 {
				k := "k" + strconv.Itoa((g+i)%3)
				res, err := s.Acquire(ctx, k, limit, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					continue
				}
				mu.Lock()
				held[k]++
				n := held[k]
				mu.Unlock()
				if n > limit {
					t.Errorf("%d holders of %s, limit %d", n, k, limit)
				}
				mu.Lock()
				held[k]--
				mu.Unlock()
				if err := s.Release(ctx, k, res.Hold); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	workers.Wait()
	close(done)
	wg.Wait()
	for k := range 3 {
		key := "k" + strconv.Itoa(k)
		for i := int64(1); i <= limit; i++ {
			res, err := s.Acquire(ctx, key, limit, 0)
			require.NoError(t, err)
			require.Equal(t, inflight.Result{Allowed: true, InFlight: i, Hold: res.Hold}, res)
		}
	}
}
