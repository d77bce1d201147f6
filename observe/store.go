package observe

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Store returns a floodgate.Store that decides exactly as s does and
// reports every step of the limiters bound to it to o, under each
// limiter's name (floodgate.Limiter.Name): counted in o.Tally, and as an
// event to o.OnDecision (and, when timed, o.OnTimed). The steps are those
// of the store protocol, so every layer above is seen: a limiter's Allow,
// AllowN, Reserve and Wait as takes (and a cancelled Wait's refund), its
// Apply by Op, the refills and refunds of a lease.New over the store.
//
//	store, err := observe.Store(redis, &observe.Observer{Tally: tally})
//	lim, err := floodgate.New(store, alg, &floodgate.Options{Name: "search"})
//
// Wrap the store at the depth whose steps are to be counted: an
// observe.Store over a lease.New counts every decision, one under it
// counts the lease's round trips.
//
// Store returns s itself when o is nil or has none of Tally, OnDecision
// and OnTimed: an unobserved store costs nothing. The store returned has
// a Close method (io.Closer) that closes s, if s has one, and otherwise
// does nothing; its Bind refuses a name that fails floodgate.CheckName
// whatever s accepts, so that a Tally never counts under a name the
// metrics adapters cannot export. Store returns an error matching
// floodgate.ErrInvalidConfig for a nil s or an invalid Observer.
func Store(s floodgate.Store, o *Observer) (floodgate.Store, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: observe: nil store", floodgate.ErrInvalidConfig)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if !o.decisions() {
		return s, nil
	}
	return &store{s: s, o: o}, nil
}

// store is the Store of Store.
type store struct {
	s floodgate.Store
	o *Observer
}

// Bind binds s and observes the Bound under name. It checks name itself
// (floodgate.CheckName), whatever s does: the name labels the metrics of
// every adapter that reads the Tally, and one Prometheus refuses (not
// UTF-8) would fail every scrape.
func (st *store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	b, err := st.s.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("%w: observe: %T bound %v to nothing", floodgate.ErrInvalidConfig, st.s, alg)
	}
	limits := 0
	if ls, ok := alg.(floodgate.Limits); ok {
		limits = len(ls)
	}
	w := &observed{b: b, name: name, limits: limits, onDecision: st.o.OnDecision, onTimed: st.o.OnTimed}
	if st.o.Tally != nil {
		w.c = st.o.Tally.add(name, limits)
	}
	if st.o.OnDecision != nil || st.o.OnTimed != nil {
		w.every = st.o.latencyThreshold()
	}
	return w, nil
}

// Close closes the store under it, when that has a Close method, and
// otherwise returns nil.
func (st *store) Close() error {
	if c, ok := st.s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// observed is the Bound of a store.
type observed struct {
	b          floodgate.Bound
	name       string
	limits     int
	onDecision func(context.Context, DecisionEvent)
	onTimed    func(context.Context, DecisionEvent)
	c          *counters // nil without a Tally
	// every selects the decisions timed: none when 0 (no function takes
	// a latency), all when 1<<32, otherwise those whose draw is below it.
	every uint64
}

// timeAll is the every of a limiter that times every decision.
const timeAll = 1 << 32

// mono is the origin of the monotonic readings: time.Since of a Time that
// carries a monotonic reading reads the monotonic clock only.
var mono = time.Now()

// since returns the time since the monotonic reading t0 of a timed
// decision, or 0 for one that is not (t0 < 0).
func since(t0 time.Duration) time.Duration {
	if t0 < 0 {
		return 0
	}
	return time.Since(mono) - t0
}

// begin returns the stripe a decision is counted on (nil without a
// Tally) and, for a decision that is timed, a monotonic reading (-1 for
// one that is not).
//
// With a Tally, a decision is timed when its stripe was marked by the
// count of an earlier one (count): the values a stripe's counters reach
// are consecutive, and those whose hash is below every are one in
// LatencyEvery, so no random number is drawn (a draw costs about as much
// as the count). Without a Tally a random number is drawn.
func (w *observed) begin() (*stripe, time.Duration) {
	if w.c == nil || w.every == timeAll {
		return w.beginUntallied()
	}
	s := w.c.stripe()
	if !s.timeNext.Load() {
		return s, -1
	}
	return s, marked(s)
}

// marked returns a monotonic reading if this decision is the one that
// clears s's mark, and -1 if another one did.
func marked(s *stripe) time.Duration {
	if s.timeNext.CompareAndSwap(true, false) {
		return time.Since(mono)
	}
	return -1
}

// beginUntallied is begin without a Tally, or timing every decision.
func (w *observed) beginUntallied() (*stripe, time.Duration) {
	var s *stripe
	if w.c != nil {
		s = w.c.stripe()
	}
	switch {
	case w.every == timeAll:
		return s, time.Since(mono)
	case w.every != 0 && uint64(rand.Uint32()) < w.every:
		return s, time.Since(mono)
	}
	return s, -1
}

// outcome returns the Outcome of a decision that returned d and err.
func outcome(d *floodgate.Decision, err error) Outcome {
	switch {
	case err != nil:
		return Failed
	case d.Allowed:
		return Allowed
	}
	return Denied
}

// count counts a decision of action a on s, bound for a Limits by its
// limit binding, and marks s when the next decision on it is to be
// timed.
//
// The binding limit is counted before the decision, and Read loads a
// stripe's counts before its bindings: so a Read that has a decision's
// count has its binding too, and the denied takes it counts without a
// binding (a single algorithm's, under a composite's name) are never
// more than there were.
func (w *observed) count(s *stripe, a Action, o Outcome, units uint64, binding int) {
	if w.limits > 0 && o != Failed && (a == ActionTake || a == ActionTakeUpTo) {
		s.bind(binding, o, w.limits)
	}
	v := s.count(a, o, units)
	// 0x9e3779b9 is 2^32 over the golden ratio: the hashes of
	// consecutive values spread evenly over [0, 2^32).
	if w.every != timeAll && uint64(uint32(v)*0x9e3779b9) < w.every {
		s.timeNext.Store(true)
	}
}

// reports reports whether a decision timed when t0 >= 0 has an event to
// send.
func (w *observed) reports(t0 time.Duration) bool {
	return w.onDecision != nil || t0 >= 0 && w.onTimed != nil
}

// report sends the event of one decision.
func (w *observed) report(ctx context.Context, t0 time.Duration, key string, req *floodgate.Request, o Outcome, d *floodgate.Decision, err error) {
	e := DecisionEvent{Name: w.name, Key: key, Op: req.Op, Check: req.Check, N: req.N, Outcome: o, Decision: *d, Limits: w.limits, Err: err, Latency: since(t0)}
	if w.onDecision != nil {
		w.onDecision(ctx, e)
	}
	if t0 >= 0 && w.onTimed != nil {
		w.onTimed(ctx, e)
	}
}

// Take is written out rather than through Apply's path: it is the hot
// path, and each call or copy of a Decision shows.
func (w *observed) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	s, t0 := w.begin()
	d, err := w.b.Take(ctx, key, n)
	o := outcome(&d, err)
	if s != nil {
		w.count(s, ActionTake, o, unitsOf(floodgate.OpTake, n), d.Binding)
	}
	if w.reports(t0) {
		w.report(ctx, t0, key, &floodgate.Request{Op: floodgate.OpTake, N: n}, o, &d, err)
	}
	return d, err
}

func (w *observed) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	s, t0 := w.begin()
	res, err := w.b.Apply(ctx, key, req, each)
	o := outcome(&res.Decision, err)
	if s != nil {
		w.count(s, actionOf(req.Op, req.Check, req.N), o, unitsOf(req.Op, req.N), res.Binding)
	}
	if w.reports(t0) {
		w.report(ctx, t0, key, &req, o, &res.Decision, err)
	}
	return res, err
}
