package memstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

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

// TestInflightModel: random Acquires, Releases (of live and stale Holds),
// Renews and Sweeps on a few keys with varying limits agree with a model
// that keeps the set of live holds per key.
func TestInflightModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, err := memstore.New(&memstore.Options{MaxKeys: 16, Shards: 1})
		if err != nil {
			rt.Fatal(err)
		}
		ctx := context.Background()
		type hold struct {
			key  string
			h    inflight.Hold
			live bool
		}
		var holds []*hold
		live := map[string]int64{}
		for i := range rapid.IntRange(1, 200).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3:
				key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "key")
				limit := rapid.Int64Range(1, 3).Draw(rt, "limit")
				res, err := s.Acquire(ctx, key, limit, 0)
				if err != nil {
					rt.Fatalf("step %d: Acquire(%s, %d) = %v", i, key, limit, err)
				}
				want := live[key] < limit
				if res.Allowed != want {
					rt.Fatalf("step %d: Acquire(%s, %d) with %d live = %+v, want Allowed %v", i, key, limit, live[key], res, want)
				}
				if want {
					live[key]++
					holds = append(holds, &hold{key: key, h: res.Hold, live: true})
				}
				if res.InFlight != live[key] {
					rt.Fatalf("step %d: Acquire(%s, %d) = %+v, want InFlight %d", i, key, limit, res, live[key])
				}
			case 4, 5, 6:
				if len(holds) == 0 {
					continue
				}
				h := holds[rapid.IntRange(0, len(holds)-1).Draw(rt, "hold")]
				if err := s.Release(ctx, h.key, h.h); err != nil {
					rt.Fatalf("step %d: Release = %v", i, err)
				}
				if h.live {
					h.live = false
					live[h.key]--
				}
			case 7, 8:
				if len(holds) == 0 {
					continue
				}
				h := holds[rapid.IntRange(0, len(holds)-1).Draw(rt, "hold")]
				ok, err := s.Renew(ctx, h.key, h.h, 0)
				if err != nil || ok != h.live {
					rt.Fatalf("step %d: Renew of a hold live=%v = %v, %v", i, h.live, ok, err)
				}
			default:
				s.Sweep()
			}
		}
	})
}
