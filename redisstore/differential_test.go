package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"github.com/floodgate-go/floodgate/memstore"
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

func drawRequest(t *rapid.T, quota int64, w time.Duration, now time.Time, admitted []time.Time) floodgate.Request {
	switch rapid.IntRange(0, 7).Draw(t, "op") {
	case 0, 1, 2, 3:
		req := floodgate.Request{Op: floodgate.OpTake, N: rapid.Int64Range(1, quota).Draw(t, "n")}
		if rapid.Bool().Draw(t, "reserve") {
			req.MaxDelay = time.Duration(rapid.Int64Range(0, 3*int64(min(w, floodgate.MaxDelay/3))).Draw(t, "maxDelay"))
		}
		return req
	case 4, 5:
		return floodgate.Request{Op: floodgate.OpTakeUpTo, N: rapid.Int64Range(1, 2*quota).Draw(t, "n")}
	default:
		at := now.Add(time.Duration(rapid.Int64Range(-int64(w), int64(w)).Draw(t, "refundAt")))
		if len(admitted) > 0 && rapid.IntRange(0, 3).Draw(t, "refundAdmitted") > 0 {
			at = admitted[rapid.IntRange(0, len(admitted)-1).Draw(t, "which")]
		}
		return floodgate.Request{Op: floodgate.OpRefund, N: rapid.Int64Range(1, quota).Draw(t, "n"), At: at}
	}
}

// TestDifferential runs random traces through redisstore (on the test's
// clock), through the algorithms' reference Steps and through memstore:
// every Result must be identical, and after every step the key must hold
// exactly the reference state with a TTL within the restore time plus the
// margin (or be gone because the state is equivalent to a missing key).
func TestDifferential(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	clock := conformance.NewClock(t0)
	margin := time.Minute
	store := newStore(t, c, &Options{Now: srv.clock(clock), ExpiryMargin: margin})
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
			want, err := m.step(now, req)
			require.NoError(rt, err)
			got, err := store.Apply(ctx, key, alg, req)
			require.NoError(rt, err, "step %d: Apply(%+v)", i, req)
			require.Equalf(rt, norm(want), norm(got), "step %d: %v Apply(%+v)", i, alg, req)
			fromMem, err := mem.Apply(ctx, key, alg, req)
			require.NoError(rt, err)
			require.Equalf(rt, norm(want), norm(fromMem), "step %d: memstore %v Apply(%+v)", i, alg, req)
			checkStored(rt, c, store.Key(key, alg.Kind()), m, now, margin, got.Allowed || !srv.real())
			if got.Allowed && req.Op != floodgate.OpRefund {
				admitted = append(admitted, got.At.Add(got.Delay))
			}
		}
	})
}
