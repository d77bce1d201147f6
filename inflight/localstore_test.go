package inflight_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/inflight/inflighttest"
)

// TestLocalStoreConformance runs the in-flight store harness on a LocalStore:
// the n clients of one process are one store.
func TestLocalStoreConformance(t *testing.T) {
	inflighttest.Run(t, func(t *testing.T, n int) []inflight.Store {
		s := inflight.NewLocalStore()
		stores := make([]inflight.Store, n)
		for i := range stores {
			stores[i] = s
		}
		return stores
	}, nil)
}

// name is the limiter name of the tests' direct calls to a LocalStore.
const name = "test"

// TestLocalStoreZeroAllocs: Acquire and Release of a key in use allocate
// nothing, on the store and through a Limiter, with a few names and with
// more than the store lists before it indexes them.
func TestLocalStoreZeroAllocs(t *testing.T) {
	for _, names := range []int{1, 3, 20} {
		t.Run(strconv.Itoa(names)+"names", func(t *testing.T) {
			s := inflight.NewLocalStore()
			ctx := context.Background()
			for i := range names - 1 {
				res, err := s.Acquire(ctx, "other"+strconv.Itoa(i), "k", 1, 0)
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			lim, err := inflight.New(s, 4, nil)
			require.NoError(t, err)
			defer lim.Close()
			warm, err := lim.Acquire(ctx, "k")
			require.NoError(t, err)
			require.NoError(t, warm.Release(ctx))
			allocs := testing.AllocsPerRun(1000, func() {
				slot, err := lim.Acquire(ctx, "k")
				if err != nil || !slot.Allowed {
					t.Fatalf("Acquire = %+v, %v", slot.Status, err)
				}
				_ = slot.Release(ctx)
			})
			require.Zero(t, allocs, "Limiter.Acquire+Release allocations")
			n := lim.Name()
			allocs = testing.AllocsPerRun(1000, func() {
				res, _ := s.Acquire(ctx, n, "k", 4, 0)
				_ = s.Release(ctx, n, "k", res.Hold)
			})
			require.Zero(t, allocs, "Store.Acquire+Release allocations")
			full, err := s.Acquire(ctx, n, "full", 1, 0)
			require.NoError(t, err)
			allocs = testing.AllocsPerRun(1000, func() {
				_, _ = s.Acquire(ctx, n, "full", 1, 0)
			})
			require.Zero(t, allocs, "Store.Acquire denial allocations")
			require.NoError(t, s.Release(ctx, n, "full", full.Hold))
		})
	}
}

// TestLocalStoreRotationZeroAllocs: keys used in turn, each idle between
// its requests as in-flight keys are, stay in the table: Acquire and
// Release allocate nothing once each key has been seen.
func TestLocalStoreRotationZeroAllocs(t *testing.T) {
	s := inflight.NewLocalStore()
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	i := 0
	next := func() {
		k := keys[i%len(keys)]
		i++
		res, err := s.Acquire(ctx, name, k, 4, 0)
		if err != nil || !res.Allowed {
			t.Fatalf("Acquire(%s) = %+v, %v", k, res, err)
		}
		_ = s.Release(ctx, name, k, res.Hold)
	}
	for range keys {
		next()
	}
	// Per request, as the other allocation tests count (under the race
	// detector, sync.Pool drops a quarter of its Puts, which rounds to
	// 0 per request).
	require.Zero(t, testing.AllocsPerRun(10*len(keys), next), "allocations per request, %d keys in turn", len(keys))
	require.Equal(t, len(keys), s.Len())
}

// TestLocalStoreNames: names are numbered once, by whichever of many
// concurrent first Acquires comes first, past the short list of names
// too; each name's holds stay its own; a bad name is refused each time
// and never numbered.
func TestLocalStoreNames(t *testing.T) {
	s := inflight.NewLocalStore()
	ctx := context.Background()
	const names, goroutines = 40, 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		holders = map[string]int{}
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range names {
				n := "name" + strconv.Itoa((i+g)%names)
				res, err := s.Acquire(ctx, n, "k", 1, 0)
				if !assert.NoError(t, err) {
					return
				}
				if res.Allowed {
					mu.Lock()
					holders[n]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, holders, names)
	for n, c := range holders {
		require.Equal(t, 1, c, "holders of k under %s, limit 1", n)
	}
	require.Equal(t, names, s.Len(), "one entry per (name, key)")
	for _, bad := range []string{"", "{", "a}b", "\xff"} {
		for range 2 {
			_, err := s.Acquire(ctx, bad, "k", 1, 0)
			require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "name %q", bad)
		}
	}
	res, err := s.Acquire(ctx, "last", "k", 1, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.InFlight)
}

// TestLocalStoreReclaim: keys without requests in flight are reclaimed;
// a key with one is never forgotten, since forgetting it would admit more
// than its limit.
func TestLocalStoreReclaim(t *testing.T) {
	s := inflight.NewLocalStore()
	ctx := context.Background()
	held := make([]inflight.Hold, 100)
	for i := range held {
		res, err := s.Acquire(ctx, name, "held"+strconv.Itoa(i), 1, 0)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		held[i] = res.Hold
	}
	// Key rotation through idle keys reclaims idle keys only.
	for i := range 100 * inflight.LocalShards() {
		k := "idle" + strconv.Itoa(i)
		res, err := s.Acquire(ctx, name, k, 1, 0)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, name, k, res.Hold))
	}
	for i := range held {
		res, err := s.Acquire(ctx, name, "held"+strconv.Itoa(i), 1, 0)
		require.NoError(t, err)
		require.False(t, res.Allowed, "held%d was forgotten while held", i)
	}
	// An insertion reclaims the idle keys of its shard when the shard has
	// doubled since its last sweep (from 64 entries).
	require.LessOrEqual(t, s.Len(), 2*(len(held)+64*inflight.LocalShards()), "entries")
	for i, h := range held {
		require.NoError(t, s.Release(ctx, name, "held"+strconv.Itoa(i), h))
	}
	s.Sweep()
	require.Zero(t, s.Len(), "entries after Sweep")
}

// TestLocalStoreReclaimRace: Acquires racing Sweeps never lose a hold nor
// admit past the limit.
func TestLocalStoreReclaimRace(t *testing.T) {
	s := inflight.NewLocalStore()
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
				res, err := s.Acquire(ctx, name, k, limit, 0)
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
				if err := s.Release(ctx, name, k, res.Hold); err != nil {
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
			res, err := s.Acquire(ctx, name, key, limit, 0)
			require.NoError(t, err)
			require.Equal(t, inflight.Result{Allowed: true, InFlight: i, Hold: res.Hold}, res)
		}
	}
}

// TestLocalStoreModel: random Acquires, Releases (of live and stale Holds),
// Renews and Sweeps on a few keys under a few names, with varying limits,
// agree with a model that keeps the set of live holds per (name, key).
func TestLocalStoreModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := inflight.NewLocalStore()
		ctx := context.Background()
		type nameKey struct{ name, key string }
		type hold struct {
			nk   nameKey
			h    inflight.Hold
			live bool
		}
		var holds []*hold
		live := map[nameKey]int64{}
		for i := range rapid.IntRange(1, 200).Draw(rt, "steps") {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3:
				nk := nameKey{
					name: rapid.SampledFrom([]string{"x", "y", "xy"}).Draw(rt, "name"),
					key:  rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "key"),
				}
				limit := rapid.Int64Range(1, 3).Draw(rt, "limit")
				res, err := s.Acquire(ctx, nk.name, nk.key, limit, 0)
				if err != nil {
					rt.Fatalf("step %d: Acquire(%v, %d) = %v", i, nk, limit, err)
				}
				want := live[nk] < limit
				if res.Allowed != want {
					rt.Fatalf("step %d: Acquire(%v, %d) with %d live = %+v, want Allowed %v", i, nk, limit, live[nk], res, want)
				}
				if want {
					live[nk]++
					holds = append(holds, &hold{nk: nk, h: res.Hold, live: true})
				}
				if res.InFlight != live[nk] {
					rt.Fatalf("step %d: Acquire(%v, %d) = %+v, want InFlight %d", i, nk, limit, res, live[nk])
				}
			case 4, 5, 6:
				if len(holds) == 0 {
					continue
				}
				h := holds[rapid.IntRange(0, len(holds)-1).Draw(rt, "hold")]
				if err := s.Release(ctx, h.nk.name, h.nk.key, h.h); err != nil {
					rt.Fatalf("step %d: Release = %v", i, err)
				}
				if h.live {
					h.live = false
					live[h.nk]--
				}
			case 7, 8:
				if len(holds) == 0 {
					continue
				}
				h := holds[rapid.IntRange(0, len(holds)-1).Draw(rt, "hold")]
				ok, err := s.Renew(ctx, h.nk.name, h.nk.key, h.h, 0)
				if err != nil || ok != h.live {
					rt.Fatalf("step %d: Renew of a hold live=%v = %v, %v", i, h.live, ok, err)
				}
			default:
				s.Sweep()
			}
		}
	})
}
