package observe

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/floodgate-go/floodgate"
)

// Action is what a step of a limiter did, as the metrics adapters count
// it (their op label): the Op of the step, with a settlement's charges
// and give-backs apart and check-only steps on their own.
type Action uint8

const (
	// ActionTake: a take (Allow, AllowN, Reserve, Wait, Apply of
	// OpTake). A step of an Op floodgate does not define, which fails,
	// counts here too.
	ActionTake Action = iota
	// ActionTakeUpTo: a take of up to n units (OpTakeUpTo: a lease
	// refill).
	ActionTakeUpTo
	// ActionSettle: a settlement charging units (OpSettle, N > 0).
	ActionSettle
	// ActionRefund: a settlement giving units back (OpSettle, N < 0: a
	// cancelled Wait, a lease's return).
	ActionRefund
	// ActionCheck: a check-only step (Request.Check), of any Op.
	ActionCheck

	// NumActions is the number of Actions, the length of the arrays of
	// Counts.
	NumActions = 5
)

var actionNames = [NumActions]string{"take", "take_up_to", "settle", "refund", "check"}

// String returns "take", "take_up_to", "settle", "refund" or "check":
// the values of the op label of the metrics adapters.
func (a Action) String() string {
	if a < NumActions {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Action returns the action of e.
func (e *DecisionEvent) Action() Action { return actionOf(e.Op, e.Check, e.N) }

// Units returns the units e counts for in Counts.Units: N, for
// ActionRefund the units given back (-N), and 0 for a failed step that
// asked for fewer than one.
func (e *DecisionEvent) Units() uint64 { return unitsOf(e.Op, e.N) }

func actionOf(op floodgate.Op, check bool, n int64) Action {
	switch {
	case check:
		return ActionCheck
	case op == floodgate.OpTakeUpTo:
		return ActionTakeUpTo
	case op == floodgate.OpSettle && n < 0:
		return ActionRefund
	case op == floodgate.OpSettle:
		return ActionSettle
	}
	return ActionTake
}

func unitsOf(op floodgate.Op, n int64) uint64 {
	switch {
	case n > 0:
		return uint64(n)
	case op == floodgate.OpSettle && n < 0:
		return uint64(-n) // -MinInt64 wraps to 1<<63, its magnitude
	}
	return 0
}

// A Tally counts the decisions of the limiters observed with an Observer
// that has it (Observer.Tally), by limiter name, Action and Outcome, with
// their units and, for a floodgate.Limits, the limit that bound them: the
// counts a metrics adapter exports, read when it is scraped instead of
// pushed to it one decision at a time. Counting a decision costs one
// atomic addition on a counter its goroutine rarely shares with another,
// much less than an OnDecision call (docs/observability.md has the
// figures).
//
// Limiters observed under one name are counted as one, and share their
// counters: a Tally grows with the names it counts (a few kilobytes
// each), not with the limiters built under them. A Tally is safe for
// concurrent use; its zero value is an empty Tally, ready to use, and it
// must not be copied once used.
type Tally struct {
	mu   sync.Mutex
	sets []*counters // in the order the limiters were observed
}

// Counts are the decisions of one limiter name counted by a Tally.
// Their arrays are indexed by Action and Outcome ([ActionTake][Allowed]);
// index 0 of an Outcome dimension is always zero.
type Counts struct {
	// Name is the limiter's name.
	Name string
	// Limits is the number of limits of a floodgate.Limits composite (the
	// largest, when limiters of one name differ), 0 for a single
	// algorithm.
	Limits int
	// Decisions counts the decisions.
	Decisions [NumActions][4]uint64
	// Units sums the units of the decisions (DecisionEvent.Units): asked
	// for, for ActionSettle charged, for ActionRefund given back.
	Units [NumActions][4]uint64
	// Binding counts the takes (ActionTake, ActionTakeUpTo) of a
	// floodgate.Limits that were decided, by the index of the limit that
	// bound them (the denying one on a denial) and Outcome (Allowed or
	// Denied); it has Limits elements.
	Binding [][4]uint64
}

// Read returns the counts of every limiter name the Tally has counted, in
// the order the names were first observed. Each count only grows; a
// decision being counted while Read runs is in the counts of this Read or
// of the next one, and its units and binding may be read one Read apart
// from its count, but a Read that has its count has its binding.
func (t *Tally) Read() []Counts {
	t.mu.Lock()
	sets := t.sets[:len(t.sets):len(t.sets)]
	t.mu.Unlock()
	var out []Counts
	index := make(map[string]int, len(sets))
	for _, c := range sets {
		i, ok := index[c.name]
		if !ok {
			i = len(out)
			index[c.name] = i
			out = append(out, Counts{Name: c.name})
		}
		c.addTo(&out[i])
	}
	return out
}

// add returns the counters of a limiter observed under name: those of an
// earlier limiter of the same name and number of limits, so that the
// Tally grows with the names it counts, not with the limiters built.
func (t *Tally) add(name string, limits int) *counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.sets {
		if c.name == name && c.limits == limits {
			return c
		}
	}
	c := newCounters(name, limits, stripesFor(runtime.GOMAXPROCS(0)))
	t.sets = append(t.sets, c)
	return c
}

// counters are the counters of one observed limiter, in stripes (four
// per processor, at most 64), so that goroutines deciding at once on
// different processors mostly add to different cache lines. A stripe
// takes 576 bytes.
type counters struct {
	name    string
	limits  int
	shift   uint // a stripe's index is the top bits of a 64-bit hash
	stripes []stripe
}

// stripe is one set of counters. A decision of units u adds 1 to
// n[action][outcome] and u-1 to extra[action][outcome] (when u is not 1),
// or, when u is 0, 1 to none[action][outcome]: so the common decision of one
// unit makes one atomic addition, and both sums Read computes (decisions
// n+none, units n+extra) only grow.
type stripe struct {
	// timeNext is set when the next decision on this stripe is to be
	// timed. It is read by every decision, so it shares a cache line
	// with the counters of takes.
	timeNext atomic.Bool
	n        [NumActions][4]atomic.Uint64
	none     [NumActions][4]atomic.Uint64
	extra    [NumActions][4]atomic.Uint64
	// binding has 4·limits counters: [limit][outcome].
	binding []atomic.Uint64
	// The padding keeps the counters of neighbouring stripes off one
	// cache line.
	_ [64]byte
}

// stripesFor returns the log2 of the stripes of counters for procs
// processors: four per processor (the stripe of a goroutine is a hash,
// and two goroutines on two stripes collide half the time), at most 64.
func stripesFor(procs int) int {
	return min(bits.Len(uint(4*procs-1)), 6) // 2^b >= 4*procs
}

// newCounters returns the counters of a limiter with 2^b stripes.
func newCounters(name string, limits, b int) *counters {
	// With one stripe the shift is 64, which Go defines to give 0.
	c := &counters{name: name, limits: limits, shift: uint(64 - b), stripes: make([]stripe, 1<<b)}
	for i := range c.stripes {
		if limits > 0 {
			// Each stripe's binding counters are their own allocation,
			// padded to a cache line, for the reason of stripe's padding.
			c.stripes[i].binding = make([]atomic.Uint64, 4*limits, 4*limits+8)
		}
	}
	return c
}

// stripe returns the stripe of the calling goroutine.
//
// Go names no processor to its code, so the stripe is chosen by the
// address of the goroutine's stack: goroutines run on stacks of their
// own, so concurrent deciders mostly land on different stripes, and a
// goroutine keeps its stripe between decisions (until its stack moves).
// The address is only hashed, never used as a pointer. It pays
// (BenchmarkCost/count in docs/observability.md): on 2 processors, two
// goroutines adding to one stripe took about 4 times as long per
// addition as on their own stripes.
func (c *counters) stripe() *stripe {
	var local byte
	h := uint64(uintptr(unsafe.Pointer(&local))>>11) * 0x9e3779b97f4a7c15
	return &c.stripes[h>>c.shift&uint64(len(c.stripes)-1)]
}

// count counts one decision and returns the value the counter it added
// to reached, for sampling.
func (s *stripe) count(a Action, o Outcome, units uint64) uint64 {
	if units == 0 {
		return s.none[a][o].Add(1)
	}
	if units != 1 {
		s.extra[a][o].Add(units - 1)
	}
	return s.n[a][o].Add(1)
}

// bind counts a decided take of a floodgate.Limits bound by limit i.
func (s *stripe) bind(i int, o Outcome, limits int) {
	if uint(i) < uint(limits) {
		s.binding[4*i+int(o)].Add(1)
	}
}

// addTo adds c's counts to sum. It loads a stripe's counts before its
// bindings, which count adds first (see observed.count).
func (c *counters) addTo(sum *Counts) {
	sum.Limits = max(sum.Limits, c.limits)
	for len(sum.Binding) < c.limits {
		sum.Binding = append(sum.Binding, [4]uint64{})
	}
	for i := range c.stripes {
		s := &c.stripes[i]
		for k := range NumActions {
			for o := range 4 {
				n := s.n[k][o].Load()
				sum.Decisions[k][o] += n + s.none[k][o].Load()
				sum.Units[k][o] += n + s.extra[k][o].Load()
			}
		}
		for j := range s.binding {
			sum.Binding[j/4][j%4] += s.binding[j].Load()
		}
	}
}
