package floodgatetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// traces is the number of random traces of each randomized case.
const traces = 100

// genAlgorithm draws one of the five algorithms with a small quota and a
// window of 1 s to 30 s (long enough for a real server's TTLs to outlive a
// trace that runs in milliseconds), or now and then a Limits of two or
// three of them.
func genAlgorithm(g *gen) floodgate.Algorithm {
	if g.ints(0, 3) == 0 {
		return genLimits(g)
	}
	return genOne(g)
}

// genOne draws one of the five algorithms, as genAlgorithm does.
func genOne(g *gen) floodgate.Algorithm {
	return genKind(g, step.Kind(g.ints(int(step.KindTokenBucket), int(step.KindSlidingLog))))
}

// genLimits draws a Limits of two or three algorithms, of one kind or
// several.
func genLimits(g *gen) floodgate.Limits {
	ls := floodgate.Limits{genOne(g), genOne(g)}
	if g.ints(0, 2) == 0 {
		ls = append(ls, genKind(g, kindOf(ls[0]))) // a second limit of a kind
	}
	return ls
}

// genKind draws a configuration of kind k, as genAlgorithm does.
func genKind(g *gen, k step.Kind) floodgate.Algorithm {
	quota := g.int64s(1, 12)
	window := time.Duration(g.int64s(1_000, 30_000)) * time.Millisecond
	switch k {
	case step.KindTokenBucket:
		return floodgate.TokenBucket{Rate: g.int64s(1, 7), Per: window, Burst: quota}
	case step.KindLeakyBucket:
		return floodgate.LeakyBucket{Rate: g.int64s(1, 7), Per: window, Capacity: quota}
	case step.KindFixedWindow:
		if g.ints(0, 2) == 0 {
			// Drawn among the fixed windows, of a kind of their own.
			return genCalendar(g, quota)
		}
		return floodgate.FixedWindow{Limit: quota, Window: window}
	case step.KindCalendarWindow:
		return genCalendar(g, quota)
	case step.KindSlidingWindow:
		return floodgate.SlidingWindow{Limit: quota, Window: window}
	default:
		return floodgate.SlidingLog{Limit: quota, Window: window}
	}
}

// calendarZones are the zones of the calendar windows the traces draw:
// whole-hour, quarter-hour and DST offsets.
var calendarZones = func() []*time.Location {
	var locs []*time.Location
	for _, name := range []string{"UTC", "Asia/Kathmandu", "America/New_York"} {
		if loc, err := time.LoadLocation(name); err == nil {
			locs = append(locs, loc)
		}
	}
	return locs
}()

// genCalendar draws a calendar day whose reset falls within the first
// half minute of the traces (t0 plus 0 to 30 s), so that they cross it.
func genCalendar(g *gen, quota int64) floodgate.CalendarWindow {
	loc := calendarZones[g.ints(0, len(calendarZones)-1)]
	l := t0.In(loc)
	tod := time.Duration(l.Hour())*time.Hour + time.Duration(l.Minute())*time.Minute + time.Duration(l.Second())*time.Second
	return floodgate.CalendarWindow{Limit: quota, Unit: floodgate.Day, Location: loc,
		Offset: (tod + time.Duration(g.int64s(0, 30))*time.Second) % (24 * time.Hour)}
}

// kindOf returns the kind of one of the five configurations.
func kindOf(alg floodgate.Algorithm) step.Kind {
	k, err := step.KindOf(alg)
	if err != nil {
		panic(err) // the cases use the five configurations only
	}
	return k
}

// runReference runs random traces of every operation, by every route, with
// time moving forward (and now and then slightly back), through the store
// and through the reference transitions, and requires identical results.
// Since the routes share the key's state and each is checked against the
// same reference, a store's Take and Apply are held to the same decisions.
func (h *harness) runReference(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	for i := range traces {
		g := h.rng(t, i)
		p := s.pair(t, genAlgorithm(g))
		keys := []string{fmt.Sprintf("ref/%d/a", i), fmt.Sprintf("ref/%d/b", i)}
		h.trace(t, g, clock, i, []pair{p}, keys, g.count(1, 40))
	}
	// Sliding windows with sub-windows, whose state is of a kind of its
	// own: traces of their own, so that the identity checks' draws (two
	// configurations of one kind share state) never mix the two counters.
	for i := range traces / 2 {
		g := h.rng(t, traces+i)
		alg := genSubWindowed(g)
		if !h.supported(t, s, alg) {
			return
		}
		p := s.pair(t, alg)
		keys := []string{fmt.Sprintf("sub/%d/a", i), fmt.Sprintf("sub/%d/b", i)}
		h.trace(t, g, clock, i, []pair{p}, keys, g.count(1, 60))
	}
}

// genSubWindowed draws a SlidingWindow with 2 to 60 sub-windows of 100 ms
// to 3 s.
func genSubWindowed(g *gen) floodgate.SlidingWindow {
	subs := []int{2, 3, 4, 5, 10, 60}[g.ints(0, 5)]
	sub := time.Duration(g.int64s(100, 3_000)) * time.Millisecond
	return floodgate.SlidingWindow{Limit: g.int64s(1, 12), Window: time.Duration(subs) * sub, SubWindows: subs}
}

// trace runs steps random steps of the limiters ps on keys, on the virtual
// clock, and requires the Results of the reference, whose state belongs to
// (name, key, kind): limiters of one name and kind share a key's state,
// limiters of two names or two kinds do not.
func (h *harness) trace(t *testing.T, g *gen, clock *Clock, i int, ps []pair, keys []string, steps int) {
	t.Helper()
	ctx := context.Background()
	var (
		ref      Reference
		admitted []time.Time // instants units were admitted for, for refunds
		log      []string    // the steps so far, for the failure message
	)
	var algs []string
	for _, p := range ps {
		algs = append(algs, fmt.Sprintf("%v named %q", p.alg, p.name))
	}
	first := ps[0].alg.Policy().Window
	now := t0.Add(g.dur(0, first))
	for n := range steps {
		p := ps[g.ints(0, len(ps)-1)]
		quota, window := p.alg.Policy().Quota, p.alg.Policy().Window
		switch g.ints(0, 9) {
		case 0: // stay
		case 1:
			// Slightly back: a tenth of a window, and never more than 3 s
			// (a calendar day's tenth is hours, past which a store's keys
			// may have expired on its own clock while the reference, which
			// forgets nothing, still counts them).
			now = now.Add(-g.dur(1, min(window/10, 3*time.Second)))
		case 2, 3:
			now = now.Add(g.dur(1, 2*window))
		case 4, 5, 6:
			// On a grid that hits window ends and refill instants.
			now = now.Add(window / 20 * time.Duration(g.int64s(1, 25)))
		default:
			now = now.Add(g.dur(1, window/4))
		}
		clock.Set(now)
		key := keys[g.ints(0, len(keys)-1)]
		req := floodgate.Request{N: g.int64s(1, quota)}
		switch g.ints(0, 9) {
		case 0, 1:
			req.Op = floodgate.OpTakeUpTo
			req.N = g.int64s(1, quota+2)
		case 2:
			req.Op = floodgate.OpSettle
			if g.ints(0, 1) == 0 {
				req.N = -req.N // a give-back, else a charge
			}
			req.At = now
			if len(admitted) > 0 && g.ints(0, 1) == 0 {
				req.At = admitted[g.ints(0, len(admitted)-1)]
			}
		case 3, 4:
			req.MaxDelay = g.dur(0, 2*window)
		}
		req.Check = g.ints(0, 7) == 0
		ls, composite := p.alg.(floodgate.Limits)
		var wantEach, each []floodgate.Decision
		rs := routes(req)
		if composite && g.ints(0, 1) == 0 {
			wantEach, each = make([]floodgate.Decision, len(ls)), make([]floodgate.Decision, len(ls))
			rs = applyRoutes
		}
		r := rs[g.ints(0, len(rs)-1)]
		want, werr := ref.Apply(p.name, key, p.alg, now, req, wantEach)
		got, gerr := p.doEach(ctx, r, key, req, each)
		log = append(log, fmt.Sprintf("%d: t0+%v %v on %s: %v %s: %s", n, now.Sub(t0), p.alg, key, r, opString(req, t0), show(r, got)))
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("trace %d of %s %s\n%s\n%s", i, strings.Join(algs, ", "), h.replay(), strings.Join(log, "\n"), fmt.Sprintf(format, args...))
		}
		if (werr != nil) != (gerr != nil) {
			fail("err = %v, want %v", gerr, werr)
		}
		if werr != nil {
			continue
		}
		if !same(r, want, got) {
			fail("want %s", show(r, want))
		}
		if wantEach != nil && !slices.Equal(wantEach, each) {
			fail("each = %+v\nwant %+v", each, wantEach)
		}
		if want.Allowed && req.Op != floodgate.OpSettle && !req.Check {
			admitted = append(admitted, want.At.Add(want.Delay))
		}
	}
}
