package denycache

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestBoundedUnderKeyRotation: 20,000 denied keys, each asked twice, keep
// at most MaxKeys denials, and the latest keys' denials are kept.
func TestBoundedUnderKeyRotation(t *testing.T) {
	mem, err := memstore.New(nil)
	require.NoError(t, err)
	s, err := New(mem, &Options{MaxKeys: 100})
	require.NoError(t, err)
	fb, err := s.Bind("rot", floodgate.FixedWindow{Limit: 1, Window: time.Hour})
	require.NoError(t, err)
	b := fb.(*bound)
	ctx := context.Background()
	for i := range 20_000 {
		key := strconv.Itoa(i)
		for range 2 {
			_, err := b.Take(ctx, key, 1)
			require.NoError(t, err)
		}
		b.mu.RLock()
		n, ok := len(b.denials), b.denials[key] != nil
		b.mu.RUnlock()
		require.LessOrEqual(t, n, 100)
		require.True(t, ok, "key %d's denial kept", i)
	}
}
