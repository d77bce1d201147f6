package floodgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestDerivedNames checks the names of limiters built without one: a
// function of the configuration alone, readable, and a valid name.
func TestDerivedNames(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		alg  floodgate.Algorithm
		want string
	}{
		{floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, "tb:10/1s:b10"},
		{&floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 1}, "tb:1/1m0s:b1"},
		{floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 50}, "lb:10/1s:c50"},
		{floodgate.FixedWindow{Limit: 100, Window: time.Minute}, "fw:100/1m0s"},
		{floodgate.SlidingWindow{Limit: 100, Window: 1500 * time.Millisecond}, "sw:100/1.5s"},
		{floodgate.SlidingLog{Limit: 5, Window: 24 * time.Hour}, "sl:5/24h0m0s"},
		{floodgate.Limits{
			floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
			floodgate.SlidingWindow{Limit: 1000, Window: 24 * time.Hour},
		}, "tb:10/1s:b10+sw:1000/24h0m0s"},
	} {
		l, err := floodgate.New(s, tc.alg, nil)
		require.NoError(t, err, "%v", tc.alg)
		assert.Equal(t, tc.want, l.Name(), "New(%v).Name()", tc.alg)
		l, err = floodgate.New(s, tc.alg, &floodgate.Options{})
		require.NoError(t, err)
		assert.Equal(t, tc.want, l.Name(), "New(%v) with an empty Name", tc.alg)
		l, err = floodgate.New(s, tc.alg, &floodgate.Options{Name: "mine"})
		require.NoError(t, err)
		assert.Equal(t, "mine", l.Name())
	}
	// The longest derived name fits MaxNameLen: eight limits of the
	// longest numbers and durations.
	big := floodgate.TokenBucket{Rate: 1, Per: floodgate.MaxWindow, Burst: 1}
	ls := make(floodgate.Limits, 8)
	for i := range ls {
		ls[i] = big
	}
	l, err := floodgate.New(s, ls, nil)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(l.Name()), floodgate.MaxNameLen)
}

// FuzzDerivedNames: two valid configurations get the same derived name
// exactly when they are equal, so that limiters never share state by
// accident and the processes of a fleet always do. (SlidingWindow's
// SubWindows 0 and 1 are one configuration, the two-counter estimate, and
// share a name: it found them.)
func FuzzDerivedNames(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(time.Second), int64(10), uint8(0), int64(1), int64(time.Minute), int64(1))
	f.Add(uint8(2), int64(1), int64(time.Second), int64(100), uint8(3), int64(1), int64(time.Second), int64(100))
	f.Add(uint8(0), int64(10), int64(time.Second), int64(10), uint8(0), int64(1), int64(100*time.Millisecond), int64(10))
	s, err := memstore.New(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, k1 uint8, r1, p1, s1 int64, k2 uint8, r2, p2, s2 int64) {
		a, b := fuzzAlgorithm(k1, r1, p1, s1), fuzzAlgorithm(k2, r2, p2, s2)
		la, erra := floodgate.New(s, a, nil)
		lb, errb := floodgate.New(s, b, nil)
		if erra != nil || errb != nil {
			return
		}
		if (la.Name() == lb.Name()) != (same(a) == same(b)) {
			t.Fatalf("%v named %q and %v named %q", a, la.Name(), b, lb.Name())
		}
		if err := floodgate.CheckName(la.Name()); err != nil {
			t.Fatalf("%v: derived name %q: %v", a, la.Name(), err)
		}
	})
}

// TestNameErrors: a name that CheckName refuses is an error of New, and
// never reaches the store.
func TestNameErrors(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}
	for _, name := range []string{
		"a{b", "a}b", "{search}", string([]byte{0xff, 'a'}), strings.Repeat("n", floodgate.MaxNameLen+1),
	} {
		l, err := floodgate.New(s, alg, &floodgate.Options{Name: name})
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "New with the name %.20q", name)
		assert.Nil(t, l)
		_, err = s.Bind(name, alg)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "Bind(%.20q)", name)
	}
	_, err = s.Bind("", alg)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "Bind of an empty name")
	for _, name := range []string{"search", "a:b/c d", "é", strings.Repeat("n", floodgate.MaxNameLen)} {
		assert.NoError(t, floodgate.CheckName(name), "%.20q", name)
	}
}

// TestSearchAndUpload is the case: two limiters of different
// configurations keyed by the same user on one store keep their quotas
// apart; one upload leaves the ten searches of the search limit.
func TestSearchAndUpload(t *testing.T) {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	search, err := floodgate.New(s, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, nil)
	require.NoError(t, err)
	upload, err := floodgate.New(s, floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 1}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := upload.Allow(ctx, "user:42")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	admitted := 0
	for range 10 {
		d, err := search.Allow(ctx, "user:42")
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted, "searches admitted after one upload")
}

// TestZeroLimiter: a Limiter not made by New returns an error from the
// methods that check their arguments, and Allow and AllowN panic on it,
// as documented (they inline, and check nothing themselves).
func TestZeroLimiter(t *testing.T) {
	var l floodgate.Limiter
	ctx := context.Background()
	assert.Panics(t, func() { _, _ = l.Allow(ctx, "k") })
	assert.Panics(t, func() { _, _ = l.AllowN(ctx, "k", 1) })
	_, err := l.Reserve(ctx, "k", 1, time.Second)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	assert.ErrorIs(t, l.Wait(ctx, "k", 1), floodgate.ErrInvalidConfig)
	_, err = l.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpSettle, N: -1}, nil)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	assert.Equal(t, "", l.Name())
}

// FuzzArguments holds the one argument check together: ValidTake, the
// hot path's test, agrees with CheckKey and CheckRequest, and the Check
// functions return the sentinels of their documentation.
func FuzzArguments(f *testing.F) {
	f.Add("k", int64(1), int64(10), int64(0), uint8(0), int64(0))
	f.Add("", int64(0), int64(1), int64(-1), uint8(2), int64(-5))
	f.Add(strings.Repeat("k", floodgate.MaxKeyLen+1), int64(11), int64(10), int64(1), uint8(9), int64(1))
	f.Fuzz(func(t *testing.T, key string, n, quota, maxDelay int64, op uint8, sec int64) {
		if quota < 1 {
			quota = 1 - quota%1000 // the quota of a valid configuration
		}
		valid := floodgate.ValidTake(key, n, quota)
		kerr := floodgate.CheckKey(key)
		rerr := floodgate.CheckRequest(floodgate.Request{N: n}, quota)
		if valid != (kerr == nil && rerr == nil) {
			t.Fatalf("ValidTake(%.10q, %d, %d) = %v, CheckKey = %v, CheckRequest = %v", key, n, quota, valid, kerr, rerr)
		}
		if kerr != nil && !errors.Is(kerr, floodgate.ErrEmptyKey) && !errors.Is(kerr, floodgate.ErrKeyTooLong) {
			t.Fatalf("CheckKey(%.10q) = %v", key, kerr)
		}
		req := floodgate.Request{Op: floodgate.Op(op % 5), N: n, MaxDelay: time.Duration(maxDelay)}
		err := floodgate.CheckRequest(req, quota)
		want := wantErrs(req.Op, req.N, req.MaxDelay, quota)
		if req.Op > floodgate.OpSettle {
			want = append(want, floodgate.ErrInvalidConfig)
		}
		if (err == nil) != (len(want) == 0) {
			t.Fatalf("CheckRequest(%+v, %d) = %v, want one of %v", req, quota, err, want)
		}
		if err != nil && !errors.Is(err, want[0]) && !errors.Is(err, want[len(want)-1]) {
			t.Fatalf("CheckRequest(%+v, %d) = %v, want one of %v", req, quota, err, want)
		}
		at := time.Unix(sec, 0)
		if terr := floodgate.CheckTime(at); (terr == nil) != (sec >= 0 && sec < 9_000_000_000) {
			t.Fatalf("CheckTime(%v) = %v", at, terr)
		} else if terr != nil && !errors.Is(terr, floodgate.ErrInvalidConfig) {
			t.Fatalf("CheckTime(%v) = %v, want ErrInvalidConfig", at, terr)
		}
		nerr := floodgate.CheckName(key)
		if ok := key != "" && len(key) <= floodgate.MaxNameLen && utf8.ValidString(key) && !strings.ContainsAny(key, "{}"); ok != (nerr == nil) {
			t.Fatalf("CheckName(%.20q) = %v", key, nerr)
		}
	})
}

// same returns alg with SlidingWindow's SubWindows 1 written as 0, the
// value it equals.
func same(alg floodgate.Algorithm) floodgate.Algorithm {
	if sw, ok := alg.(floodgate.SlidingWindow); ok && sw.SubWindows == 1 {
		sw.SubWindows = 0
		return sw
	}
	return alg
}
