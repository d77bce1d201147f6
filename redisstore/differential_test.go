package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// result is a Result with its instant as a number, for comparisons.
type result struct {
	floodgate.Decision
	Granted int64
	At      int64
}

func norm(r floodgate.Result) result {
	return result{Decision: r.Decision, Granted: r.Granted, At: r.At.UnixNano()}
}

// maxWindow is the longest whole-microsecond window.
const maxWindow = floodgate.MaxWindow / time.Microsecond * time.Microsecond

func drawAlg(t *rapid.T) floodgate.Algorithm {
	quota := rapid.OneOf(rapid.Int64Range(1, 8), rapid.Int64Range(1, 1_000_000)).Draw(t, "quota")
	window := rapid.SampledFrom([]time.Duration{
		time.Microsecond, time.Millisecond, 3*time.Millisecond + 7*time.Microsecond,
		time.Second, time.Hour, maxWindow,
	}).Draw(t, "window")
	switch rapid.IntRange(1, 5).Draw(t, "kind") {
	case 1, 2:
		rate := rapid.Int64Range(1, 7).Draw(t, "rate")
		per := rapid.SampledFrom([]time.Duration{
			time.Duration(rate), time.Millisecond, 7*time.Millisecond + 3, time.Second,
			floodgate.MaxWindow / time.Duration(quota) / 8 * time.Duration(rate),
		}).Draw(t, "per")
		per = max(per, time.Duration(rate))
		if (per+time.Duration(rate)-1)/time.Duration(rate)*time.Duration(quota) > floodgate.MaxWindow {
			quota = 1
		}
		if rapid.Bool().Draw(t, "tb") {
			return floodgate.TokenBucket{Rate: rate, Per: per, Burst: quota}
		}
		return floodgate.LeakyBucket{Rate: rate, Per: per, Capacity: quota}
	case 3:
		return floodgate.FixedWindow{Limit: quota, Window: window}
	case 4:
		return floodgate.SlidingWindow{Limit: quota, Window: window}
	default:
		return floodgate.SlidingLog{Limit: quota, Window: window}
	}
}

// drawAdvance draws how far the clock moves before a step: mostly within a
// window, sometimes not at all, sometimes far, rarely backwards.
func drawAdvance(t *rapid.T, w time.Duration, margin time.Duration) time.Duration {
	w = max(w, 1)
	// A clock that steps back further than the TTL margin may find keys
	// expired that the reference still holds: TTLs cannot run backwards.
	back := min(w, margin/2)
	switch rapid.IntRange(0, 9).Draw(t, "advanceKind") {
	case 0, 1:
		return 0
	case 2:
		return time.Duration(rapid.Int64Range(int64(w), 5*int64(w)).Draw(t, "far"))
	case 3:
		return -time.Duration(rapid.Int64Range(1, int64(back)).Draw(t, "back"))
	default:
		return time.Duration(rapid.Int64Range(1, int64(w)).Draw(t, "advance"))
	}
}

// drawRequest draws a step: a take (sometimes with a delay), a take up to
// n, a give-back or a charge (mostly of units admitted earlier, sometimes
// of more units than any algorithm holds); a sixth of them check-only.
func drawRequest(t *rapid.T, quota int64, w time.Duration, now time.Time, admitted []time.Time) floodgate.Request {
	var req floodgate.Request
	switch rapid.IntRange(0, 9).Draw(t, "op") {
	case 0, 1, 2, 3:
		req = floodgate.Request{Op: floodgate.OpTake, N: rapid.Int64Range(1, quota).Draw(t, "n")}
		if rapid.Bool().Draw(t, "reserve") {
			req.MaxDelay = time.Duration(rapid.Int64Range(0, 3*int64(min(w, floodgate.MaxDelay/3))).Draw(t, "maxDelay"))
		}
	case 4, 5:
		req = floodgate.Request{Op: floodgate.OpTakeUpTo, N: rapid.Int64Range(1, 2*quota).Draw(t, "n")}
	default:
		at := now.Add(time.Duration(rapid.Int64Range(-int64(w), int64(w)).Draw(t, "settleAt")))
		if len(admitted) > 0 && rapid.IntRange(0, 3).Draw(t, "settleAdmitted") > 0 {
			at = admitted[rapid.IntRange(0, len(admitted)-1).Draw(t, "which")]
		}
		// Up to a quota back, up to two quotas charged (the debt bound is
		// one more quota), or the extremes of int64.
		n := rapid.OneOf(rapid.Int64Range(-quota, -1), rapid.Int64Range(1, 2*quota),
			rapid.SampledFrom([]int64{math.MinInt64, math.MaxInt64})).Draw(t, "settleN")
		req = floodgate.Request{Op: floodgate.OpSettle, N: n, At: at}
	}
	req.Check = rapid.IntRange(0, 5).Draw(t, "check") == 0
	return req
}

// TestDifferential runs random traces through redisstore (on the test's
// clock), through the algorithms' reference transitions and through memstore:
// every Result must be identical, and after every step the key must hold
// exactly the reference state with a TTL within the restore time plus the
// margin (or be gone because the state is equivalent to a missing key). The
// traces take, take up to n, charge and give back, and check each of
// these: a check leaves the key as it was, its TTL too.
func TestDifferential(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	margin := time.Minute
	sync := srv.clock(clock) // moves miniredis' clock (TTLs) to the test's
	store := newStore(t, c, &Options{Now: sync, ExpiryMargin: margin})
	ctx := context.Background()
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		alg := drawAlg(rt)
		key := fmt.Sprintf("k%d", cases)
		p := alg.Policy()
		start := t0.Add(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "start")))
		if rapid.IntRange(0, 9).Draw(rt, "nearEpoch") == 0 {
			start = time.Unix(0, rapid.Int64Range(0, 10*int64(p.Window)).Draw(rt, "startNs"))
		}
		clock.Set(start)
		mem, err := memstore.New(&memstore.Options{Now: clock.Now})
		require.NoError(rt, err)
		m := &model{alg: alg}
		var admitted []time.Time
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := range steps {
			d := drawAdvance(rt, p.Window, margin)
			if clock.Now().Add(d).UnixNano() < 0 {
				d = 0
			}
			clock.Advance(d)
			now := clock.Now()
			req := drawRequest(rt, p.Quota, p.Window, now, admitted)
			rkey := store.Key(testName, key, kindOf(alg))
			sync()
			raw, ttl := rawKey(rt, c, rkey)
			was := m.stored()
			want, err := m.step(now, req)
			require.NoError(rt, err)
			got, err := applyOnce(ctx, store, key, alg, req)
			require.NoError(rt, err, "step %d: Apply(%+v)", i, req)
			require.Equalf(rt, norm(want), norm(got), "step %d: %v Apply(%+v)", i, alg, req)
			fromMem, err := applyOnce(ctx, mem, key, alg, req)
			require.NoError(rt, err)
			require.Equalf(rt, norm(want), norm(fromMem), "step %d: memstore %v Apply(%+v)", i, alg, req)
			if req.Check {
				require.Equal(rt, was, m.stored(), "step %d: the reference's check changed the state", i)
				unchanged(rt, c, rkey, raw, ttl, "step %d: %v Apply(%+v)", i, alg, req)
			}
			checkStored(rt, c, rkey, m, now, margin, !srv.real(), got.Allowed && !req.Check)
			if got.Allowed && req.Op != floodgate.OpSettle && !req.Check {
				admitted = append(admitted, got.At.Add(got.Delay))
			}
		}
	})
}

// TestSeededStates writes random states straight into Redis, including
// large windows and counts where the sliding counter's float estimate
// rounds, and checks one step from each against the reference transition: the
// traces of TestDifferential rarely reach such states.
func TestSeededStates(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	margin := time.Minute
	store := newStore(t, c, &Options{Now: srv.clock(clock), ExpiryMargin: margin})
	ctx := context.Background()
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		key := fmt.Sprintf("s%d", cases)
		quota := rapid.OneOf(rapid.Int64Range(1, 10), rapid.Int64Range(1, 1<<40)).Draw(rt, "quota")
		w := rapid.OneOf(
			rapid.Just(maxWindow),
			rapid.SampledFrom([]time.Duration{time.Microsecond, 999 * time.Microsecond, time.Second, 7 * 24 * time.Hour}),
			rapid.Custom(func(t *rapid.T) time.Duration {
				return time.Duration(rapid.Int64Range(1, int64(maxWindow/time.Microsecond)).Draw(t, "us")) * time.Microsecond
			}),
		).Draw(rt, "window")
		now := t0.Add(time.Duration(rapid.Int64Range(0, int64(floodgate.MaxWindow)).Draw(rt, "now")))
		ws := now.UnixNano() - now.UnixNano()%int64(w)
		count := func(name string) int64 {
			return rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, quota)).Draw(rt, name)
		}
		m := &model{}
		switch rapid.IntRange(0, 3).Draw(rt, "kind") {
		case 0, 1:
			interval := rapid.Int64Range(1, max(int64(floodgate.MaxWindow)/quota, 1)).Draw(rt, "interval")
			q := min(quota, int64(floodgate.MaxWindow)/interval)
			if rapid.Bool().Draw(rt, "tb") {
				m.alg = floodgate.TokenBucket{Rate: 1, Per: time.Duration(interval), Burst: q}
			} else {
				m.alg = floodgate.LeakyBucket{Rate: 1, Per: time.Duration(interval), Capacity: q}
			}
			tau := interval * q
			m.tat = now.UnixNano() + rapid.Int64Range(-2*tau, tau+int64(floodgate.MaxDelay)).Draw(rt, "tat")
		case 2:
			m.alg = floodgate.FixedWindow{Limit: quota, Window: w}
			m.fw = step.FixedWindowState{Start: ws + int64(w)*rapid.Int64Range(-2, 2).Draw(rt, "k"), Count: count("count")}
		default:
			m.alg = floodgate.SlidingWindow{Limit: quota, Window: w}
			m.sw = step.SlidingWindowState{Start: ws + int64(w)*rapid.Int64Range(-2, 1).Draw(rt, "k"), Prev: count("prev"), Curr: count("curr")}
			if m.sw.Prev+m.sw.Curr > quota && rapid.Bool().Draw(rt, "valid") {
				m.sw.Prev = quota - m.sw.Curr
			}
		}
		rkey := store.Key(testName, key, kindOf(m.alg))
		// The TTL the script would have set when it wrote this state.
		ttl := time.Duration(max(m.horizon(now), 0)).Round(time.Millisecond) + time.Millisecond + margin
		clock.Set(now)
		srv.clock(clock)()
		require.NoError(rt, c.Set(ctx, rkey, m.stored(), ttl).Err())
		var admitted []time.Time
		for i := range rapid.IntRange(1, 3).Draw(rt, "steps") {
			req := drawRequest(rt, min(quota, m.alg.Policy().Quota), w, now, admitted)
			raw, ttl := rawKey(rt, c, rkey)
			want, err := m.step(now, req)
			require.NoError(rt, err)
			got, err := applyOnce(ctx, store, key, m.alg, req)
			require.NoError(rt, err, "step %d: Apply(%+v)", i, req)
			require.Equalf(rt, norm(want), norm(got), "step %d: %v Apply(%+v)", i, m.alg, req)
			if req.Check {
				unchanged(rt, c, rkey, raw, ttl, "step %d: %v Apply(%+v)", i, m.alg, req)
			}
			checkStored(rt, c, rkey, m, now, margin, !srv.real(), got.Allowed && !req.Check)
			if got.Allowed && req.Op != floodgate.OpSettle && !req.Check {
				admitted = append(admitted, got.At.Add(got.Delay))
			}
		}
	})
}

// TestSlidingWindowRounding checks states where the offset the script
// solves for (slidingwindow.lua's earliest) is one off because of float
// rounding, so that its settling steps decide, and states where another
// order of operations in the estimate would decide otherwise (both found
// by searching random states): the script must settle on the offset the
// reference's bisection finds.
func TestSlidingWindowRounding(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	now := srv.clock(clock)
	store := newStore(t, c, &Options{Now: now})
	ctx := context.Background()
	for i, tc := range []struct {
		w           time.Duration
		limit, p, c int64
		n           int64
	}{
		{2901790250839000, 649, 311, 559, 64},                               // settles upward
		{2818271290616000, 390015, 326001, 375538, 5894},                    // settles upward
		{2832649417393000, 5989, 5503, 5676, 163},                           // settles upward
		{4082628779634000, 14726103190, 4195478954, 4320320706, 9484009490}, // settles downward
		{3198307452436000, 2109559, 1059346, 892766, 754450},                // settles downward
		{3673893131620000, 24121498, 2202749, 20174280, 2317364},            // settles downward
		// States where p·((W−e)/W) would settle elsewhere than (p·(W−e))/W:
		// the order of operations is part of the contract.
		{1579124660951000, 38853, 20653, 5019, 14715},
		{2168563587308000, 131618829, 34408867, 109969856, 4220785},
		{4393266426207000, 92, 5, 77, 11},
		{3720728835345000, 60232, 21475, 48275, 4637},
	} {
		alg := floodgate.SlidingWindow{Limit: tc.limit, Window: tc.w}
		ws := t0.UnixNano() / int64(tc.w) * int64(tc.w)
		seed := step.SlidingWindowState{Start: ws, Prev: tc.p, Curr: tc.c}
		// The Result comes from the reference; the script's own offset
		// decides only whether the delay fits: reserve with exactly the
		// delay needed, and with 1ns less.
		_, ref, err := step.SlidingWindow(alg, seed, time.Unix(0, ws), floodgate.Request{Op: floodgate.OpTake, N: tc.n, MaxDelay: tc.w})
		require.NoError(t, err)
		require.True(t, ref.Allowed)
		require.Positive(t, ref.Delay)
		for j, op := range []floodgate.Request{
			{Op: floodgate.OpTake, N: tc.n, MaxDelay: ref.Delay},
			{Op: floodgate.OpTake, N: tc.n, MaxDelay: ref.Delay - 1},
			{Op: floodgate.OpTakeUpTo, N: tc.n},
		} {
			key := fmt.Sprintf("r%d-%d", i, j)
			m := &model{alg: alg, sw: seed}
			clock.Set(time.Unix(0, ws))
			at := now() // moves miniredis' clock before the key is written
			require.NoError(t, c.Set(ctx, store.Key(testName, key, kindOf(alg)), m.stored(), time.Hour).Err())
			want, err := m.step(at, op)
			require.NoError(t, err)
			got, err := applyOnce(ctx, store, key, alg, op)
			require.NoError(t, err)
			require.Equalf(t, norm(want), norm(got), "%v from %v: Apply(%+v)", alg, m.stored(), op)
		}
	}
}

// TestSlidingWindowFlatEstimate runs the sliding counter's script on a
// state where its float estimate is flat over about 2^40 consecutive
// offsets (a limit of 2^40, one unit in the previous window, a window near
// 2^52 ns): the script must find the least offset at which the request
// fits without stepping through them (which would keep Redis busy for
// hours). The script is called directly, so that nothing but its own
// search decides; TestSeededStates checks it against the reference's
// bisection on such states.
func TestSlidingWindowFlatEstimate(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	prefix := testPrefix(t, c)
	ctx := context.Background()
	const (
		limit = int64(1) << 40
		w     = int64(maxWindow)
	)
	alg := floodgate.SlidingWindow{Limit: limit, Window: maxWindow}
	a, err := resolve(alg)
	require.NoError(t, err)
	ws := t0.UnixNano() / w * w
	avail := func(e int64) float64 { return float64(limit) - float64(1)*float64(w-e)/float64(w) }
	// The least offset at which limit units fit, by bisection.
	lo, hi := int64(0), w
	for lo < hi {
		if mid := lo + (hi-lo)/2; float64(limit) <= avail(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	require.Less(t, lo, w-1<<30, "the estimate is flat far before the window's end")
	for _, tc := range []struct {
		maxDelay int64
		allowed  int64
	}{{lo, 1}, {lo - 1, 0}} {
		key := fmt.Sprintf("%s{flat%d}:sw", prefix, tc.allowed)
		require.NoError(t, c.Set(ctx, key, fmt.Sprintf("%d:1:0", ws), time.Hour).Err())
		req := floodgate.Request{Op: floodgate.OpTake, N: limit, MaxDelay: time.Duration(tc.maxDelay)}
		args := a.args(strconv.FormatInt(ws, 10), time.Unix(0, ws), req, 1000)
		call, cancel := context.WithTimeout(ctx, 10*time.Second)
		reply, err := run(call, c, prog(step.KindSlidingWindow), false, key, nil, args, trip{})
		cancel()
		require.NoError(t, err)
		r, err := newReplyReader(reply)
		require.NoError(t, err)
		require.Equal(t, tc.allowed, r.int(4), "maxDelay %d", tc.maxDelay)
		require.NoError(t, r.err)
	}
}

// TestSlidingLogLong checks long logs against memstore: logs of 40 to 100
// entries, of which 0 to all have left the window, then takes and takes up
// to n. A log longer than 32 entries is read and trimmed 32 rows at a time
// (slidinglog.lua), which the random traces of TestDifferential, at most
// 40 steps long, rarely reach.
func TestSlidingLogLong(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	store := newStore(t, c, &Options{Now: srv.clock(clock)})
	mem, err := memstore.New(&memstore.Options{Now: clock.Now})
	require.NoError(t, err)
	ctx := context.Background()
	alg := floodgate.SlidingLog{Limit: 100, Window: time.Second}
	both := func(key string, req floodgate.Request) floodgate.Result {
		t.Helper()
		want, err := applyOnce(ctx, mem, key, alg, req)
		require.NoError(t, err)
		got, err := applyOnce(ctx, store, key, alg, req)
		require.NoError(t, err)
		require.Equal(t, norm(want), norm(got), "%s at %v: %+v", key, clock.Now(), req)
		return got
	}
	for _, entries := range []int{40, 70, 100} {
		for _, gone := range []int{0, 1, 31, 32, 33, 39, 64, 65, 99, 100} {
			if gone > entries {
				continue
			}
			key := fmt.Sprintf("long:%d:%d", entries, gone)
			clock.Set(t0)
			for range entries {
				require.True(t, both(key, floodgate.Request{Op: floodgate.OpTake, N: 1}).Allowed)
				clock.Advance(5 * time.Millisecond)
			}
			// The first gone entries leave the window: entry i was taken
			// at t0 + 5ms·i.
			clock.Set(t0.Add(time.Second + time.Duration(gone-1)*5*time.Millisecond + time.Millisecond))
			if gone == 0 {
				clock.Set(t0.Add(time.Duration(entries) * 5 * time.Millisecond))
			}
			res := both(key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: 3})
			require.Equal(t, int64(min(3, 100-entries+gone)), res.Granted, "%s: room for the entries gone", key)
			both(key, floodgate.Request{Op: floodgate.OpTake, N: 2, MaxDelay: time.Second})
			clock.Advance(time.Millisecond)
			both(key, floodgate.Request{Op: floodgate.OpTake, N: 1})
		}
	}
}
