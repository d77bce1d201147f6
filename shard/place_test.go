package shard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/shard"
)

// keyRecorder is a Store around a Store that records the keys its Bounds
// are asked for, by the name they were bound under.
type keyRecorder struct {
	floodgate.Store
	mu   sync.Mutex
	keys map[string]bool
}

func (r *keyRecorder) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := r.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return recordingBound{b, r}, nil
}

type recordingBound struct {
	floodgate.Bound
	r *keyRecorder
}

func (b recordingBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	b.r.record(key)
	return b.Bound.Take(ctx, key, n)
}

func (b recordingBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b.r.record(key)
	return b.Bound.Apply(ctx, key, req, each)
}

func (r *keyRecorder) record(key string) {
	r.mu.Lock()
	r.keys[key] = true
	r.mu.Unlock()
}

// slotted is a memstore with a redisstore's Slot: the keys of a shard
// Store over it are placed as over that redisstore, and a test asks each
// shard (Probes = Shards-1 on a spent limit) to see every key.
type slotted struct {
	*keyRecorder
	rs *redisstore.Store
}

func (s slotted) Slot(key string) int { return s.rs.Slot(key) }

// TestPlacement: the shards of a key land on slots spread evenly over the
// 16,384, shard 0's plus ⌊i·16384/K⌋ exactly without HashKeys (whatever
// the key holds: braces, a colon, a long or a binary key), and within ±1%
// of 16384/K with HashKeys; so on a Cluster of 3 masters with contiguous
// slot ranges, K = 16 puts at most 6 shards on one master.
func TestPlacement(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	keys := []string{"global", "tenant:42", "a{b}c", "}x", "{", "x}", strings.Repeat("k", 1000), "\x00\xff\x7b\x7d", "ünï"}
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	for _, hashKeys := range []bool{false, true} {
		for _, prefix := range []string{"", "t:"} {
			rs, err := redisstore.New(c, &redisstore.Options{Prefix: prefix, HashKeys: hashKeys})
			require.NoError(t, err)
			t.Cleanup(func() { _ = rs.Close() })
			ks, keys := []int{2, 3, 16, 64}, keys
			if hashKeys {
				// A search per shard (about 780 hashes at K = 16): fewer.
				ks, keys = []int{2, 3, 16}, keys[:12]
			}
			for _, k := range ks {
				rec := &keyRecorder{Store: newMem(t, nil), keys: map[string]bool{}}
				s := newShard(t, slotted{rec, rs}, shard.Options{Shards: k, Probes: k - 1})
				lim, err := floodgate.New(s, floodgate.FixedWindow{Limit: int64(k), Window: time.Hour}, &floodgate.Options{Name: "p"})
				require.NoError(t, err)
				for _, key := range keys {
					clear(rec.keys)
					for range 2 * k {
						_, err := lim.Allow(context.Background(), key)
						require.NoError(t, err)
					}
					require.Len(t, rec.keys, k, "every shard asked")
					var slots []int
					for sk := range rec.keys {
						require.True(t, strings.HasSuffix(sk, ":"+key), "%q", sk)
						slots = append(slots, rs.Slot(sk))
					}
					checkSpread(t, slots, k, hashKeys, fmt.Sprintf("prefix %q HashKeys %v K %d key %q", prefix, hashKeys, k, key))
				}
			}
		}
	}
}

// checkSpread requires that slots, sorted, step by Slots/k: exactly (to
// the slot) or within ±1% (at least 1) when approximate.
func checkSpread(t *testing.T, slots []int, k int, approximate bool, what string) {
	t.Helper()
	slices.Sort(slots)
	step := shard.Slots / k
	tol := 1 // ⌊i·Slots/k⌋ steps by step or step+1
	if approximate {
		tol = 2*max(step/100, 1) + 1
	}
	for i := range slots {
		next := slots[(i+1)%len(slots)]
		if i == len(slots)-1 {
			next += shard.Slots
		}
		gap := next - slots[i]
		require.True(t, gap >= step-tol && gap <= step+tol, "%s: slots %v: gap %d, want %d ± %d", what, slots, gap, step, tol)
	}
	// On 3 masters of contiguous ranges, at most ⌈k/3⌉+1 shards each.
	var per [3]int
	for _, s := range slots {
		per[min(s*3/shard.Slots, 2)]++
	}
	for _, n := range per {
		require.LessOrEqual(t, n, (k+2)/3+1, "%s: shards per master %v", what, per)
	}
}
