package memstore_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// TestSubWindowsWide runs keys of a sliding window with sub-windows whose
// limit is past the 4-byte counts memstore keeps while they fit: random
// takes, reservations and settles of up to a third of the limit, decided
// exactly as step.SubWindow decides them on 8-byte counts, before and
// after a key's total first passes 2^32 − 1 (the store then moves the
// key to 8-byte counts). Every fourth key has a small limit and stays on
// 4-byte counts.
func TestSubWindowsWide(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	s, err := memstore.New(&memstore.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(6, 12))
	passed := 0
	for k := range 8 {
		a := floodgate.SlidingWindow{Limit: 3 << 32, Window: time.Second, SubWindows: 10}
		if k%4 == 3 {
			a.Limit = 50
		}
		b, err := s.Bind("wide", a)
		require.NoError(t, err)
		key := "k" + string(rune('a'+k))
		var ref step.SubWindowState
		for i := range 500 {
			clock = clock.Add(time.Duration(rng.Int64N(int64(a.Window) / 4)))
			req := floodgate.Request{Op: floodgate.OpTake, N: 1 + rng.Int64N(a.Limit/3)}
			switch rng.IntN(5) {
			case 0:
				req.MaxDelay = time.Duration(rng.Int64N(int64(a.Window)))
			case 1:
				req.Op, req.At = floodgate.OpSettle, clock.Add(-time.Duration(rng.Int64N(int64(a.Window))))
				if rng.IntN(2) == 0 {
					req.N = -req.N
				}
			case 2:
				req.Check = true
			}
			before := ref.Total
			want, werr := step.SubWindow(a, &ref, clock, req)
			got, gerr := b.Apply(ctx, key, req, nil)
			require.Equal(t, werr, gerr, "key %s step %d", key, i)
			require.Equal(t, want, got, "key %s step %d: %+v", key, i, req)
			if before <= 1<<32-1 && ref.Total > 1<<32-1 {
				passed++
			}
		}
	}
	if passed == 0 {
		t.Fatal("no key's total passed 2^32 − 1: the test cannot fail")
	}
}
