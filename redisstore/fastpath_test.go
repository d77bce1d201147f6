package redisstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// TestScriptFastPaths runs random steps on Redis TIME, where the buckets',
// the fixed window's and the sliding window's scripts take their fast
// paths (bucket_fast.lua, fixedwindow_fast.lua, slidingwindow_fast.lua) for
// takes (the sliding window's without delay) and their general paths for
// the other operations. Every reply is checked against the
// reference transition (a disagreement fails the step with ErrMismatch); on
// miniredis, whose TIME the test sets, each admission's stored state and
// TTL are checked too. States written on a client clock (nanoseconds, not
// microseconds) are mixed in.
func TestScriptFastPaths(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 11))
	for _, alg := range []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 10},      // 1ms
		floodgate.TokenBucket{Rate: 3, Per: 3 * time.Millisecond, Burst: 4}, // 1ms
		floodgate.TokenBucket{Rate: 7, Per: 5 * time.Microsecond, Burst: 3}, // 715ns
		floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 2},          // 333,333,334ns
		floodgate.TokenBucket{Rate: 1, Per: 1500 * time.Millisecond, Burst: 3},
		floodgate.LeakyBucket{Rate: 1000, Per: time.Second, Capacity: 10},
		floodgate.LeakyBucket{Rate: 7, Per: 5 * time.Microsecond, Capacity: 3},
		floodgate.LeakyBucket{Rate: 3, Per: time.Second, Capacity: 2},
		floodgate.LeakyBucket{Rate: 1, Per: 1500 * time.Millisecond, Capacity: 3},
		floodgate.FixedWindow{Limit: 5, Window: 3 * time.Millisecond},
		floodgate.FixedWindow{Limit: 2, Window: 7 * time.Microsecond},
		floodgate.FixedWindow{Limit: 3, Window: 1500 * time.Millisecond},
		floodgate.SlidingWindow{Limit: 5, Window: 3 * time.Millisecond},
		floodgate.SlidingWindow{Limit: 2, Window: 7 * time.Microsecond},
		floodgate.SlidingWindow{Limit: 9, Window: 10 * time.Millisecond},
		floodgate.SlidingWindow{Limit: 1000, Window: time.Second},
		floodgate.FixedWindow{Limit: 1000, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 1000, Window: time.Hour},
	} {
		t.Run(alg.(interface{ String() string }).String(), func(t *testing.T) {
			now := t0.Add(time.Duration(r.Int64N(int64(time.Second))))
			if srv.mini != nil {
				srv.mini.SetTime(now)
			}
			s := newStore(t, c, nil)
			// A second store on a client clock writes nanosecond states
			// into the same keys now and then.
			nsStore := newStore(t, c, &Options{Prefix: s.prefix, Now: func() time.Time {
				if srv.mini != nil {
					return now.Add(time.Duration(1 + r.Int64N(999)))
				}
				return time.Now().Add(time.Duration(1 + r.Int64N(999)))
			}})
			quota := alg.Policy().Quota
			margin := int64(DefaultExpiryMargin / time.Millisecond)
			for i := range 400 {
				if srv.mini != nil {
					now = now.Add(time.Duration(r.Int64N(int64(3 * time.Millisecond))))
					srv.mini.SetTime(now)
				}
				key := "k" + strconv.Itoa(r.IntN(3))
				req := floodgate.Request{Op: floodgate.OpTake, N: 1 + r.Int64N(quota)}
				switch r.IntN(8) {
				case 0:
					req.Op = floodgate.OpTakeUpTo
				case 1, 2:
					req.MaxDelay = time.Duration(r.Int64N(int64(5 * time.Millisecond)))
				}
				store := s
				if r.IntN(20) == 0 {
					store = nsStore
				}
				res, err := applyOnce(ctx, store, key, alg, req)
				require.NoError(t, err, "step %d: %+v", i, req)
				if store != s || !res.Allowed {
					continue
				}
				// The TTL is the time until the state carries no
				// information (the bucket full, the window over), rounded
				// up to a millisecond, plus the margin.
				rkey := s.Key(testName, key, kindOf(alg))
				v, err := c.Get(ctx, rkey).Result()
				require.NoError(t, err)
				start, _, _ := strings.Cut(v, ":")
				at, err := strconv.ParseInt(start, 10, 64)
				require.NoError(t, err)
				d := at - res.At.UnixNano()
				switch a := alg.(type) {
				case floodgate.FixedWindow:
					d += int64(a.Window)
				case floodgate.SlidingWindow:
					// Its current count leaves the estimate two windows
					// after its window's start.
					d += 2 * int64(a.Window)
				}
				if _, ok := alg.(floodgate.SlidingWindow); !ok {
					require.Equal(t, res.ResetAfter, time.Duration(d), "step %d: state %q against ResetAfter", i, v)
				}
				want := time.Duration((d+999_999)/1_000_000+margin) * time.Millisecond
				if srv.mini != nil {
					require.Equal(t, want, srv.mini.TTL(rkey), "step %d: TTL of %q", i, v)
					continue
				}
				// A real Redis's TTL runs down from the write: a TTL
				// within a minute below the one due (the hour-long
				// windows tell a TTL a window short from it).
				pttl, err := c.PTTL(ctx, rkey).Result()
				require.NoError(t, err)
				require.LessOrEqual(t, pttl, want, "step %d: TTL of %q", i, v)
				require.Greater(t, pttl, want-time.Minute, "step %d: TTL of %q", i, v)
			}
		})
	}
}

// TestStringReply checks how a fast path's one-string reply is split: single
// spaces between at most six non-empty elements, or an ErrReply.
func TestStringReply(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  []string // nil: an ErrReply
	}{
		{"1 2 3 4 5 6", []string{"1", "2", "3", "4", "5", "6"}},
		{"1795979871 51212000 0 1795979871052212000 1 1", []string{"1795979871", "51212000", "0", "1795979871052212000", "1", "1"}},
		{"7", []string{"7"}},
		{"", nil},
		{" 1", nil},
		{"1 ", nil},
		{"1  2", nil},
		{"1 2 3 4 5 6 7", nil},
	} {
		r, err := newReplyReader(tc.reply)
		if tc.want == nil {
			require.ErrorIs(t, err, ErrReply, "%q", tc.reply)
			continue
		}
		require.NoError(t, err, "%q", tc.reply)
		var got []string
		for i := range tc.want {
			got = append(got, r.str(i))
		}
		require.NoError(t, r.err)
		require.Equal(t, tc.want, got)
		r.str(len(tc.want))
		require.ErrorIs(t, r.err, ErrReply, "%q has %d elements", tc.reply, len(tc.want))
	}
	r, err := newReplyReader("1 x")
	require.NoError(t, err)
	r.int(1)
	require.ErrorIs(t, r.err, ErrReply)
	_, err = newReplyReader(int64(7))
	require.ErrorIs(t, err, ErrReply)
}

// TestSlidingWindowAhead takes without delay on a sliding window whose
// state was reserved two windows ahead, where it must deny: a state ahead
// admits nothing now, however much room its estimate shows (here a window
// of 1µs and a limit of a million, so that a reservation lands two windows
// ahead without filling its window). It needs a clock that stands still.
func TestSlidingWindowAhead(t *testing.T) {
	srv := newServer(t)
	if srv.real() {
		t.Skip("a real Redis's clock passes a 1µs window between calls; miniredis's stands still")
	}
	srv.mini.SetTime(t0)
	s := newStore(t, srv.client(t), nil)
	ctx := context.Background()
	alg := floodgate.SlidingWindow{Limit: 1_000_000, Window: time.Microsecond}
	res, err := applyOnce(ctx, s, "k", alg, floodgate.Request{Op: floodgate.OpTake, N: 1_000_000})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = applyOnce(ctx, s, "k", alg, floodgate.Request{Op: floodgate.OpTake, N: 999_500, MaxDelay: time.Millisecond})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Greater(t, res.Delay, time.Microsecond, "reserved two windows ahead")
	res, err = applyOnce(ctx, s, "k", alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
	require.NoError(t, err)
	require.False(t, res.Allowed)
}

// TestKeysAllocs: a Limits' keys cost two allocations however many limits
// it has (one string cut into the keys, and the slice), and a script
// call's arguments as many for eight keys as for two: each key goes to
// go-redis by its address, not boxed in an interface.
func TestKeysAllocs(t *testing.T) { // not parallel: AllocsPerRun
	s := newStore(t, newServer(t).client(t), &Options{Prefix: "fgtest:keys:"})
	suffixes := []string{":a", ":bb", ":ccc"}
	keys := s.limitKeys("user:42", suffixes)
	require.Equal(t, []string{"fgtest:keys:{user:42}:a", "fgtest:keys:{user:42}:bb", "fgtest:keys:{user:42}:ccc"}, keys)
	require.Equal(t, 2.0, testing.AllocsPerRun(100, func() { _ = s.limitKeys("user:42", suffixes) }))

	ctx := context.Background()
	args := []any{"1", "2"}
	two, eight := make([]string, 2), make([]string, 8)
	for i := range eight { // not "": the empty string is boxed for free
		eight[i] = "k" + strconv.Itoa(i)
	}
	copy(two, eight)
	a2 := testing.AllocsPerRun(100, func() { _ = evalCmd(ctx, progLimits, false, false, "", two, args) })
	a8 := testing.AllocsPerRun(100, func() { _ = evalCmd(ctx, progLimits, false, false, "", eight, args) })
	require.Equal(t, a2, a8, "allocations of a call on 2 keys and on 8")
}

// TestLimitsDecodeAllocs: a Limits' fast reply (one string) is decoded
// without an allocation, and a reply that differs from the reference in
// one element is refused.
func TestLimitsDecodeAllocs(t *testing.T) {
	a, err := resolve(floodgate.Limits{
		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
		floodgate.FixedWindow{Limit: 10, Window: time.Second},
	})
	require.NoError(t, err)
	const now = int64(1_800_000_000_123_456_000)
	s, ns := now/1e9, now%1e9
	start := now - now%1e9
	reply := strconv.FormatInt(s, 10) + " " + strconv.FormatInt(ns, 10) + " 1" +
		" 1 " + strconv.FormatInt(s, 10) + " " + strconv.FormatInt(ns, 10) + " 0 " + strconv.FormatInt(now+1e8, 10) + " 1 1" +
		" 2 " + strconv.FormatInt(s, 10) + " " + strconv.FormatInt(ns, 10) + " 0:0 " + strconv.FormatInt(start, 10) + ":1 1 1"
	req := floodgate.Request{Op: floodgate.OpTake, N: 1}
	each := make([]floodgate.Decision, 2)
	res, err := a.decodeLimits(reply, req, each)
	require.NoError(t, err, reply)
	require.True(t, res.Allowed)
	require.Equal(t, int64(9), each[0].Remaining)
	var boxed any = reply // as go-redis hands it over
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := a.decodeLimits(boxed, req, each); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	for _, bad := range []string{
		strings.Replace(reply, ":1 1 1", ":2 1 1", 1),   // the fixed window's count
		strings.Replace(reply, " 1 1 2 ", " 1 1 3 ", 1), // a limit that is not the next
		strings.Replace(reply, " 0:0 ", " 0:0  ", 1),    // two spaces
		reply[:len(reply)-4],                            // cut short
		reply + " 1",                                    // a step too many
		strings.Replace(reply, strconv.FormatInt(s, 10)+" "+strconv.FormatInt(ns, 10)+" 1", strconv.FormatInt(s, 10)+" "+strconv.FormatInt(ns, 10)+" 0", 1), // not written
	} {
		_, err := a.decodeLimits(bad, req, each)
		require.Error(t, err, bad)
	}
}

// TestSubWindowsFastPath runs takes without delay on Redis TIME, which
// subwindow_fast.lua decides, on keys left idle for 0 to S+2 sub-windows
// between steps (so that the ring moves by none, one, several with and
// without wrapping around, and all of its slots), with now and then a
// reservation or a take-up-to, which the general script decides. On
// miniredis, whose TIME the test sets, every Result and every stored
// state (all S+1 counts, not only the header the store compares) equal
// step.SubWindow's, and every TTL ends when the newest sub-window's count
// leaves (plus the margin); on a real Redis each stored state is checked to parse
// with counts that sum to its total.
func TestSubWindowsFastPath(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(26, 60))
	for _, subs := range []int{2, 3, 5, 10, 60} {
		g := 10 * time.Millisecond
		alg := floodgate.SlidingWindow{Limit: int64(3 * subs), Window: time.Duration(subs) * g, SubWindows: subs}
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, c, nil)
			now := t0.Truncate(time.Microsecond)
			refs := map[string]*step.SubWindowState{}
			for i := range 600 {
				now = now.Add(time.Duration(r.Int64N(int64(time.Duration(subs+3)*g))) / time.Duration(1+r.IntN(8))).Truncate(time.Microsecond)
				if srv.mini != nil {
					srv.mini.SetTime(now)
				}
				key := "k" + strconv.Itoa(r.IntN(3))
				req := floodgate.Request{Op: floodgate.OpTake, N: 1 + r.Int64N(alg.Limit/2)}
				switch r.IntN(10) {
				case 0:
					req.Op = floodgate.OpTakeUpTo
				case 1:
					req.MaxDelay = time.Duration(r.Int64N(int64(alg.Window)))
				}
				res, err := applyOnce(ctx, s, key, alg, req)
				require.NoError(t, err, "step %d: %+v", i, req)
				raw, err := c.Get(ctx, s.Key(testName, key, step.KindSubWindows)).Result()
				require.NoError(t, err)
				got, ok := parseSub(raw)
				require.True(t, ok, "step %d: stored state %x does not parse (or its counts do not sum to its total)", i, raw)
				if srv.mini == nil {
					continue
				}
				ref := refs[key]
				if ref == nil {
					ref = new(step.SubWindowState)
					refs[key] = ref
				}
				want, err := step.SubWindow(alg, ref, now, req)
				require.NoError(t, err)
				require.True(t, want.At.Equal(res.At), "step %d: At %v, want %v", i, res.At, want.At)
				res.At = want.At
				require.Equal(t, want, res, "step %d: %+v", i, req)
				require.True(t, got.Equal(*ref), "step %d: %+v: stored %+v, want %+v", i, req, got, *ref)
				// The key lives until its newest sub-window's count has
				// left, plus the margin, to the millisecond.
				pttl, err := c.PTTL(ctx, s.Key(testName, key, step.KindSubWindows)).Result()
				require.NoError(t, err)
				wantTTL := time.Unix(0, (ref.Newest+int64(subs)+1)*ref.Sub).Sub(now) + DefaultExpiryMargin
				require.InDelta(t, float64(wantTTL), float64(pttl), float64(time.Millisecond), "step %d: TTL %v, want %v", i, pttl, wantTTL)
			}
		})
	}
}
