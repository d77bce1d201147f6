package memstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/timemath"
	"github.com/floodgate-go/floodgate/memstore"
)

// applyOnly binds its Store with a Take that goes through Apply, so that a
// Limiter over it decides every Allow with the general path.
type applyOnly struct{ s *memstore.Store }

func (a applyOnly) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := a.s.Bind(name, alg)
	return viaApply{b}, err
}

type viaApply struct{ floodgate.Bound }

func (v viaApply) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := v.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// sameError requires that got and want are both nil or carry the same text
// and sentinel.
func sameError(t tb, got, want error, msg string) {
	t.Helper()
	if want == nil {
		require.NoError(t, got, msg)
		return
	}
	require.Error(t, got, msg)
	require.Equal(t, want.Error(), got.Error(), msg)
	for _, sentinel := range []error{floodgate.ErrInvalidConfig, floodgate.ErrInvalidN, floodgate.ErrExceedsLimit, floodgate.ErrEmptyKey, floodgate.ErrKeyTooLong} {
		require.Equal(t, errors.Is(want, sentinel), errors.Is(got, sentinel), "%s: errors.Is(%v)", msg, sentinel)
	}
}

// TestTakeMatchesApply runs random traces through two Limiters on one
// clock, one whose Allow and AllowN take memstore's fast path (token bucket
// or fixed window) and one that goes through Apply, and requires the same
// decisions and errors. Reserve
// puts the buckets in debt, Sweep reclaims entries under the fast path, and
// the clock sometimes leaves 1970 to 2255.
func TestTakeMatchesApply(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var alg floodgate.Algorithm = floodgate.TokenBucket{
			Rate:  rapid.Int64Range(1, 5).Draw(rt, "rate"),
			Per:   time.Duration(rapid.Int64Range(1, 3000).Draw(rt, "perMs")) * ms,
			Burst: rapid.Int64Range(1, 5).Draw(rt, "burst"),
		}
		if rapid.Bool().Draw(rt, "fixedWindow") {
			alg = floodgate.FixedWindow{
				Limit:  rapid.Int64Range(1, 5).Draw(rt, "limit"),
				Window: time.Duration(rapid.Int64Range(1, 3000).Draw(rt, "windowMs")) * ms,
			}
		}
		quota := alg.Policy().Quota
		var clock atomic.Pointer[time.Time]
		now := t0.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(rt, "start")))
		clock.Store(&now)
		opts := &memstore.Options{Now: func() time.Time { return *clock.Load() }, Shards: 1}
		fast, slow := newMemStore(rt, opts), newMemStore(rt, opts)
		limFast, err := floodgate.New(fast, alg, testOpts)
		require.NoError(rt, err)
		limSlow, err := floodgate.New(applyOnly{slow}, alg, testOpts)
		require.NoError(rt, err)
		ctx := context.Background()
		keys := []string{"a", "b", "", strings.Repeat("k", floodgate.MaxKeyLen+1)}
		for i := range rapid.IntRange(1, 200).Draw(rt, "steps") {
			// The clock moves forward (memstore's default clock is
			// monotonic; reclamation at a later instant is final) but may
			// read outside 1970 to 2255 for one step.
			at := now
			switch rapid.IntRange(0, 19).Draw(rt, "clock") {
			case 0:
				at = time.Unix(-1-rapid.Int64Range(0, 100).Draw(rt, "before1970"), 0)
			case 1:
				at = time.Unix(int64(timemath.MaxUnix)+rapid.Int64Range(0, 1<<40).Draw(rt, "after2255"), 0)
			case 2:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "jump")))
				at = now
			default:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(rt, "dt")))
				at = now
			}
			clock.Store(&at)
			if rapid.IntRange(0, 9).Draw(rt, "sweep") == 0 {
				fast.Sweep()
			}
			key := keys[rapid.IntRange(0, len(keys)-1).Draw(rt, "key")]
			n := rapid.Int64Range(-1, quota+1).Draw(rt, "n")
			msg := "step " + time.Duration(i).String()
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				got, gotErr := limFast.Allow(ctx, key)
				want, wantErr := limSlow.Allow(ctx, key)
				sameError(rt, gotErr, wantErr, msg)
				require.Equal(rt, want, got, "%s: Allow(%q) at %v", msg, key, at)
			case 1:
				maxDelay := time.Duration(rapid.Int64Range(0, int64(5*time.Second)).Draw(rt, "maxDelay"))
				got, gotErr := limFast.Reserve(ctx, key, n, maxDelay)
				want, wantErr := limSlow.Reserve(ctx, key, n, maxDelay)
				sameError(rt, gotErr, wantErr, msg)
				require.Equal(rt, want, got, "%s: Reserve(%q, %d, %v) at %v", msg, key, n, maxDelay, at)
			default:
				got, gotErr := limFast.AllowN(ctx, key, n)
				want, wantErr := limSlow.AllowN(ctx, key, n)
				sameError(rt, gotErr, wantErr, msg)
				require.Equal(rt, want, got, "%s: AllowN(%q, %d) at %v", msg, key, n, at)
			}
		}
	})
}

// TestTakeArguments calls the fast path directly with arguments the Limiter
// refuses before it, and requires Apply's answers.
func TestTakeArguments(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2},
		floodgate.FixedWindow{Limit: 2, Window: time.Second},
	} {
		takeArguments(t, alg)
	}
}

func takeArguments(t *testing.T, alg floodgate.Algorithm) {
	for _, tc := range []struct {
		key string
		n   int64
	}{{"k", 0}, {"k", -1}, {"k", 3}, {"", 1}, {strings.Repeat("k", floodgate.MaxKeyLen+1), 1}, {"k", 2}} {
		s := newMemStore(t, &memstore.Options{Now: func() time.Time { return t0 }})
		bound, err := s.Bind(testName, alg)
		require.NoError(t, err)
		d, err := bound.Take(context.Background(), tc.key, tc.n)
		ref := newMemStore(t, &memstore.Options{Now: func() time.Time { return t0 }})
		want, wantErr := applyOnce(context.Background(), ref, tc.key, alg, take(tc.n))
		sameError(t, err, wantErr, tc.key)
		assert.Equal(t, want.Decision, d, "Take(%q, %d)", tc.key, tc.n)
	}
}

// TestLimiterExactUnderContention is TestExactUnderContention through
// Limiter.Allow, which takes the fast path: 64 goroutines on one key of a
// token bucket or a fixed window on a frozen clock admit exactly its quota.
func TestLimiterExactUnderContention(t *testing.T) {
	const quota = 100_000
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: quota},
		floodgate.FixedWindow{Limit: quota, Window: time.Hour},
	} {
		t.Run(algName(alg), func(t *testing.T) { limiterExact(t, alg) })
	}
}

func limiterExact(t *testing.T, alg floodgate.Algorithm) {
	const goroutines, calls, quota = 64, 2_000, 100_000
	frozen := t0.Add(30*time.Minute + 500)
	s := newMemStore(t, &memstore.Options{Now: func() time.Time { return frozen }})
	lim, err := floodgate.New(s, alg, testOpts)
	require.NoError(t, err)
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range calls {
				d, err := lim.Allow(context.Background(), "hot")
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int64(goroutines*calls), allowed.Load()+denied.Load())
	assert.Equal(t, int64(quota), allowed.Load(), "admitted by %d goroutines × %d calls", goroutines, calls)
}
