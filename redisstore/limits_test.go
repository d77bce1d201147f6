package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/step"
)

// limitID names the state of a limit of a Limits: its kind and its ordinal
// among the limits of that kind, as floodgate.Limits says.
type limitID struct {
	kind step.Kind
	ord  int
}

// limitIDs returns the states of ls's limits.
func limitIDs(ls floodgate.Limits) []limitID {
	ids := make([]limitID, len(ls))
	var ords [step.KindSlidingLog + 1]int
	for i, a := range ls {
		k := kindOf(a)
		ids[i] = limitID{k, ords[k]}
		ords[k]++
	}
	return ids
}

// limitsModel is the reference of the Limits on one key: step.Members over
// a model per limit state, shared by every Limits it binds. A Step runs the
// limit's step as a check on the stored state, which keeps it as it was,
// as the contract of step.Members says (and memstore does); Keep runs the
// last Step again on the stored state.
type limitsModel struct {
	states map[limitID]*model
	ls     floodgate.Limits
	ids    []limitID
	now    time.Time
	last   [8]struct {
		at  time.Time
		req floodgate.Request
	}
	// wrote says which limits the last apply wrote, with a new TTL: those
	// it kept that granted units (a sliding log's dropped entries alone set
	// none).
	wrote [8]bool
}

// bind makes ls the Limits of the next steps, at now, and returns the
// models of its limits.
func (lm *limitsModel) bind(ls floodgate.Limits, now time.Time) []*model {
	if lm.states == nil {
		lm.states = map[limitID]*model{}
	}
	lm.ls, lm.ids, lm.now = ls, limitIDs(ls), now
	lm.wrote = [8]bool{}
	ms := make([]*model, len(ls))
	for i, id := range lm.ids {
		if lm.states[id] == nil {
			lm.states[id] = &model{}
		}
		ms[i] = lm.states[id]
		ms[i].alg = ls[i]
	}
	return ms
}

// apply runs step.Limits for ls at now.
func (lm *limitsModel) apply(ls floodgate.Limits, now time.Time, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	lm.bind(ls, now)
	return step.Limits(ls, lm, now, req, each)
}

func (lm *limitsModel) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	lm.last[i].at, lm.last[i].req = at, req
	req.Check = true
	return lm.states[lm.ids[i]].step(at, req)
}

func (lm *limitsModel) Keep(i int) {
	res, _ := lm.states[lm.ids[i]].step(lm.last[i].at, lm.last[i].req)
	lm.wrote[i] = res.Granted > 0
}

// drawLimits draws a Limits of one to three limits (kinds may repeat),
// and a second one sharing its states: the same limits, with the kinds in
// another order (each kind's limits in theirs, so that each ordinal keeps
// its configuration), perhaps without its last.
func drawLimits(t *rapid.T) (floodgate.Limits, floodgate.Limits) {
	ls := make(floodgate.Limits, rapid.IntRange(1, 3).Draw(t, "limits"))
	for i := range ls {
		ls[i] = drawAlg(t)
	}
	rank := map[step.Kind]int{}
	for _, a := range ls {
		rank[kindOf(a)] = rapid.IntRange(0, 9).Draw(t, "rank")
	}
	other := slices.Clone(ls)
	slices.SortStableFunc(other, func(a, b floodgate.Algorithm) int { return rank[kindOf(a)] - rank[kindOf(b)] })
	if len(other) > 1 && rapid.Bool().Draw(t, "drop") {
		other = other[:len(other)-1]
	}
	return ls, other
}

// longest returns the longest window (or restore time) of ls.
func longest(ls floodgate.Limits) time.Duration {
	var w time.Duration
	for _, a := range ls {
		w = max(w, a.Policy().Window)
	}
	return w
}

// TestDifferentialLimits runs random traces of two Limits that share
// states (and a single algorithm on the same key) through redisstore,
// unbatched and batched, through step.Limits over the reference
// transitions and through memstore: every Result and every limit's
// Decision (the each argument) must be identical, and after every step each
// limit's key must hold exactly the reference state with a TTL within its
// restore time plus the margin, counted from now also when the limits took
// the units at a later instant (a reservation's). A check leaves every key
// as it was, its TTL too.
func TestDifferentialLimits(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	margin := time.Minute
	sync := srv.clock(clock)
	prefix := testPrefix(t, c)
	unbatched := newStore(t, c, &Options{Prefix: prefix, Now: sync, ExpiryMargin: margin})
	batched := newStore(t, c, &Options{Prefix: prefix, Now: sync, ExpiryMargin: margin, BatchSize: 16})
	ctx := context.Background()
	cases := 0
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		key := fmt.Sprintf("k%d", cases)
		ls1, ls2 := drawLimits(rt)
		single := ls1[0]
		w := longest(ls1)
		start := t0.Add(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(rt, "start")))
		if rapid.IntRange(0, 9).Draw(rt, "nearEpoch") == 0 {
			start = time.Unix(0, rapid.Int64Range(0, 10*int64(w)).Draw(rt, "startNs"))
		}
		clock.Set(start)
		mem, err := memstore.New(&memstore.Options{Now: clock.Now})
		require.NoError(rt, err)
		lm := &limitsModel{}
		sm := &model{alg: single}
		var admitted []time.Time
		for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			ls := ls1
			if rapid.IntRange(0, 3).Draw(rt, "which") == 0 {
				ls = ls2
			}
			alone := rapid.IntRange(0, 9).Draw(rt, "single") == 0
			if alone {
				ls = floodgate.Limits{single}
			}
			d := drawAdvance(rt, ls[rapid.IntRange(0, len(ls)-1).Draw(rt, "scale")].Policy().Window, margin)
			if clock.Now().Add(d).UnixNano() < 0 {
				d = 0
			}
			clock.Advance(d)
			now := clock.Now()
			req := drawRequest(rt, ls.Policy().Quota, w, now, admitted)
			store := unbatched
			if rapid.Bool().Draw(rt, "batched") {
				store = batched
			}
			if alone {
				// A single algorithm on the key: its own state, apart
				// from the Limits'.
				want, err := sm.step(now, req)
				require.NoError(rt, err)
				got, err := applyOnce(ctx, store, key, single, req)
				require.NoError(rt, err, "step %d: Apply(%v, %+v)", i, single, req)
				require.Equalf(rt, norm(want), norm(got), "step %d: %v Apply(%+v)", i, single, req)
				fromMem, err := applyOnce(ctx, mem, key, single, req)
				require.NoError(rt, err)
				require.Equalf(rt, norm(want), norm(fromMem), "step %d: memstore %v Apply(%+v)", i, single, req)
				checkStored(rt, c, store.Key(testName, key, kindOf(single)), sm, now, margin, false, false)
				continue
			}
			ids, ms := limitIDs(ls), lm.bind(ls, now)
			sync()
			before := make([]any, len(ls))
			raws, ttls := make([]string, len(ls)), make([]time.Duration, len(ls))
			for j, id := range ids {
				before[j] = ms[j].stored()
				raws[j], ttls[j] = rawKey(rt, c, store.LimitKey(testName, key, id.kind, id.ord))
			}
			wantEach, gotEach, memEach := make([]floodgate.Decision, len(ls)), make([]floodgate.Decision, len(ls)), make([]floodgate.Decision, len(ls))
			r := req
			want, err := lm.apply(ls, now, r, wantEach)
			require.NoError(rt, err)
			got, err := applyEach(ctx, store, key, ls, r, gotEach)
			require.NoError(rt, err, "step %d: %v Apply(%+v)", i, ls, req)
			require.Equalf(rt, norm(want), norm(got), "step %d: %v Apply(%+v)", i, ls, req)
			require.Equalf(rt, wantEach, gotEach, "step %d: %v Apply(%+v): Each", i, ls, req)
			fromMem, err := applyEach(ctx, mem, key, ls, r, memEach)
			require.NoError(rt, err)
			require.Equalf(rt, norm(want), norm(fromMem), "step %d: memstore %v Apply(%+v)", i, ls, req)
			require.Equalf(rt, wantEach, memEach, "step %d: memstore %v Apply(%+v): Each", i, ls, req)
			for j, id := range ids {
				m := ms[j]
				rkey := store.LimitKey(testName, key, id.kind, id.ord)
				if req.Check {
					require.Equal(rt, before[j], m.stored(), "step %d: the reference's check changed limit %d", i, j)
					unchanged(rt, c, rkey, raws[j], ttls[j], "step %d: %v Apply(%+v)", i, ls, req)
				}
				checkStored(rt, c, rkey, m, now, margin, !srv.real(), lm.wrote[j])
			}
			if got.Allowed && req.Op != floodgate.OpSettle && !req.Check {
				admitted = append(admitted, got.At.Add(got.Delay))
			}
		}
	})
}

// limitKeys returns the Redis keys of ls's limits for key.
func limitKeys(s *Store, key string, ls floodgate.Limits) []string {
	keys := make([]string, len(ls))
	for i, id := range limitIDs(ls) {
		keys[i] = s.LimitKey(testName, key, id.kind, id.ord)
	}
	return keys
}

// TestLimitsDenialChangesNothing spends one limit of a Limits of every
// kind, then asks for more in every way a take can be denied (at once,
// with a delay the others would grant, up to n): each denial leaves every
// limit's key exactly as it was, byte for byte, and no TTL longer (on
// miniredis the clock stands still; on Redis the TTLs only run down). Each
// limit in turn is the one that denies, and binds.
func TestLimitsDenialChangesNothing(t *testing.T) {
	parallelOnMiniredis(t)
	c, clock, s := virtualStore(t, Options{})
	ctx := context.Background()
	big := floodgate.Limits{
		floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 10},
		floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 10},
		floodgate.FixedWindow{Limit: 10, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 10, Window: time.Hour},
		floodgate.SlidingLog{Limit: 10, Window: time.Hour},
	}
	small := floodgate.Limits{
		floodgate.TokenBucket{Rate: 2, Per: time.Hour, Burst: 2},
		floodgate.LeakyBucket{Rate: 2, Per: time.Hour, Capacity: 2},
		floodgate.FixedWindow{Limit: 2, Window: time.Hour},
		floodgate.SlidingWindow{Limit: 2, Window: time.Hour},
		floodgate.SlidingLog{Limit: 2, Window: time.Hour},
	}
	for d := range big {
		t.Run(kindOf(big[d]).String(), func(t *testing.T) {
			ls := slices.Clone(big)
			ls[d] = small[d]
			key := "deny:" + kindOf(big[d]).String()
			clock.Set(t0)
			res, err := applyOnce(ctx, s, key, ls, floodgate.Request{Op: floodgate.OpTakeUpTo, N: 2})
			require.NoError(t, err)
			require.Equal(t, int64(2), res.Granted, "every limit takes 2")
			clock.Advance(time.Second) // the big leaky bucket drains
			for _, req := range []floodgate.Request{
				{Op: floodgate.OpTake, N: 1},
				{Op: floodgate.OpTake, N: 2, MaxDelay: time.Minute},
				{Op: floodgate.OpTakeUpTo, N: 5},
			} {
				before := snap(t, c, limitKeys(s, key, ls))
				each := make([]floodgate.Decision, len(ls))
				res, err := applyEach(ctx, s, key, ls, req, each)
				require.NoError(t, err)
				require.False(t, res.Allowed, "%+v", req)
				require.Equal(t, d, res.Binding, "the spent limit binds")
				for i, e := range each {
					require.Equal(t, i != d, e.Allowed, "%+v: Each[%d]", req, i)
				}
				before.same(t, c, "a denial by %v: %+v", ls[d], req)
			}
		})
	}
}

// TestLimitsLongLog runs a Limits with a sliding log of 100 entries whose
// reservation takes its units at a later instant, where more than 32 of
// them (the rows the script reads at a time) have left the window: the
// check of it must trim them in its own view only, and the reservation
// for real (checked then run), on the log as the reference leaves it.
func TestLimitsLongLog(t *testing.T) {
	parallelOnMiniredis(t)
	c, clock, s := virtualStore(t, Options{ExpiryMargin: time.Minute})
	ctx := context.Background()
	ls := floodgate.Limits{
		floodgate.SlidingLog{Limit: 100, Window: time.Second},
		floodgate.FixedWindow{Limit: 1000, Window: time.Hour},
	}
	lm := &limitsModel{}
	both := func(req floodgate.Request) floodgate.Result {
		t.Helper()
		want, err := lm.apply(ls, clock.Now(), req, nil)
		require.NoError(t, err)
		got, err := applyOnce(ctx, s, "long", ls, req)
		require.NoError(t, err, "%+v at %v", req, clock.Now())
		require.Equal(t, norm(want), norm(got), "%+v at %v", req, clock.Now())
		for j, k := range limitKeys(s, "long", ls) {
			checkStored(t, c, k, lm.states[lm.ids[j]], clock.Now(), time.Minute, false, false)
		}
		return got
	}
	clock.Set(t0)
	for range 100 {
		require.True(t, both(floodgate.Request{Op: floodgate.OpTake, N: 1}).Allowed)
		clock.Advance(5 * time.Millisecond)
	}
	// At t0 + 500ms: 40 units fit once the 40 oldest entries have left,
	// at t0 + 195ms + 1s.
	for _, check := range []bool{true, true, false} {
		res := both(floodgate.Request{Op: floodgate.OpTake, N: 40, MaxDelay: time.Second, Check: check})
		require.Equal(t, 695*time.Millisecond, res.Delay)
	}
	require.False(t, both(floodgate.Request{Op: floodgate.OpTake, N: 1}).Allowed)
	clock.Advance(695 * time.Millisecond)
	both(floodgate.Request{Op: floodgate.OpTakeUpTo, N: 100})
	clock.Advance(time.Millisecond)
	both(floodgate.Request{Op: floodgate.OpTake, N: 3, MaxDelay: time.Second})
}

// TestLimitsFastPaths runs random steps of Limits on Redis TIME, where a
// take of limits that all have fast paths takes limits_fast.lua (which
// falls through to limits.lua for a delay, and for a sliding log), mixed
// with the other operations and checks. Every reply is checked against
// step.Limits by the store (a disagreement fails the step with
// ErrMismatch); on miniredis, whose TIME the test sets, every Result, each
// limit's Decision and each limit's stored state and TTL are compared with
// the reference's too.
func TestLimitsFastPaths(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	const margin = time.Minute
	s := newStore(t, c, &Options{ExpiryMargin: margin})
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 9))
	for n, ls := range []floodgate.Limits{
		{floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 10}, floodgate.FixedWindow{Limit: 5, Window: 3 * time.Millisecond}},
		{floodgate.FixedWindow{Limit: 2, Window: 7 * time.Microsecond}, floodgate.SlidingWindow{Limit: 5, Window: 3 * time.Millisecond}, floodgate.LeakyBucket{Rate: 1000, Per: time.Second, Capacity: 10}},
		{floodgate.SlidingWindow{Limit: 9, Window: 10 * time.Millisecond}, floodgate.TokenBucket{Rate: 3, Per: 3 * time.Millisecond, Burst: 4}, floodgate.TokenBucket{Rate: 1, Per: time.Millisecond, Burst: 8}},
		{floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 10}, floodgate.SlidingLog{Limit: 5, Window: 3 * time.Millisecond}},
	} {
		t.Run(fmt.Sprint(ls), func(t *testing.T) {
			now := t0.Add(time.Duration(r.Int64N(int64(time.Second)))).Truncate(time.Microsecond)
			keys := []string{fmt.Sprintf("%d:a", n), fmt.Sprintf("%d:b", n)}
			models := map[string]*limitsModel{keys[0]: {}, keys[1]: {}}
			quota := ls.Policy().Quota
			var admitted []time.Time
			for i := range 300 {
				if srv.mini != nil {
					now = now.Add(time.Duration(r.Int64N(int64(3 * time.Millisecond)))).Truncate(time.Microsecond)
					srv.mini.SetTime(now)
				}
				key := keys[r.IntN(2)]
				req := floodgate.Request{Op: floodgate.OpTake, N: 1 + r.Int64N(quota)}
				switch r.IntN(10) {
				case 0:
					req.Op = floodgate.OpTakeUpTo
				case 1, 2:
					req.MaxDelay = time.Duration(r.Int64N(int64(5 * time.Millisecond)))
				case 3:
					if len(admitted) > 0 {
						req = floodgate.Request{Op: floodgate.OpSettle, N: r.Int64N(5) - 2, At: admitted[r.IntN(len(admitted))]}
						if req.N == 0 {
							req.N = 3
						}
					}
				}
				req.Check = r.IntN(10) == 0
				got := make([]floodgate.Decision, len(ls))
				res, err := applyEach(ctx, s, key, ls, req, got)
				require.NoError(t, err, "step %d: %+v", i, req)
				if res.Allowed && req.Op != floodgate.OpSettle && !req.Check {
					admitted = append(admitted, res.At.Add(res.Delay))
				}
				if srv.mini == nil {
					continue
				}
				require.True(t, res.At.Equal(now), "step %d: the script's instant %v, TIME %v", i, res.At, now)
				want := make([]floodgate.Decision, len(ls))
				m := models[key]
				ref, err := m.apply(ls, now, req, want)
				require.NoError(t, err)
				require.Equal(t, norm(ref), norm(res), "step %d: %v %+v", i, ls, req)
				require.Equal(t, want, got, "step %d: %v %+v: Each", i, ls, req)
				for j, id := range m.ids {
					checkStored(t, c, s.LimitKey(testName, key, id.kind, id.ord), m.states[id], now, margin, true, m.wrote[j])
				}
			}
		})
	}
}
