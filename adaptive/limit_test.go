package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the fixed instant the limit tests start from.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one sample fed to a Limit and the limit expected after it.
type step struct {
	rtt      time.Duration
	inflight int
	dropped  bool
	want     int
}

// feed runs steps through l, one sample every second from t0, and checks the
// limit after each.
func feed(t *testing.T, l Limit, steps []step) {
	t.Helper()
	for i, s := range steps {
		in := Sample{Start: t0.Add(time.Duration(i) * time.Second), RTT: s.rtt, InFlight: s.inflight, Dropped: s.dropped}
		got := l.Update(in)
		require.Equalf(t, s.want, got, "step %d: Update(%+v) = %d, want %d", i, in, got, s.want)
		require.Equalf(t, s.want, l.Current(), "step %d: Current() after Update(%+v)", i, in)
	}
}

func TestLg(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{0, 1}, {1, 1}, {10, 1}, {99, 1}, {100, 2}, {999, 2}, {1000, 3}, {9999, 3}, {10000, 4}, {1e9, 9},
	} {
		assert.Equalf(t, tc.want, lg(tc.in), "lg(%d)", tc.in)
	}
}

func TestFixed(t *testing.T) {
	f, err := NewFixed(7)
	require.NoError(t, err)
	feed(t, f, []step{
		{rtt: time.Millisecond, inflight: 7, want: 7},
		{rtt: time.Hour, inflight: 100, dropped: true, want: 7},
	})
	for _, bad := range []int{0, -1} {
		_, err := NewFixed(bad)
		assert.ErrorIsf(t, err, ErrInvalidOption, "NewFixed(%d)", bad)
	}
}
