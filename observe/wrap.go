package observe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Wrap returns a Limiter that decides exactly as l does and reports each
// of its decisions to o: counted in o.Tally, and as an event to
// o.OnDecision (and, when timed, o.OnTimed), named name. It reports
// Allow, AllowN, Reserve, Wait and Apply, so the layers built on a
// Limiter (lease's refills and refunds, httplimit's settlements) are seen
// too, with their Op. Policy and Algorithm are l's.
//
// Wrap returns l itself when o is nil or has none of Tally, OnDecision
// and OnTimed: an unobserved limiter costs nothing. It returns an error
// matching floodgate.ErrInvalidConfig for a nil l, an empty name, a name
// that is not UTF-8, or an invalid Observer.
//
// Wrap a limiter once, and give the wrapper to the layers above it: a
// lease.Limiter over a wrapped remote reports its refills under the
// remote's name (KindTakeUpTo); wrap the lease.Limiter too, under another
// name, to see the decisions it serves. For a limiter built on a Store,
// New is cheaper.
func Wrap(l floodgate.Limiter, name string, o *Observer) (floodgate.Limiter, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: observe: nil limiter", floodgate.ErrInvalidConfig)
	}
	if err := checkWrap(name, o); err != nil {
		return nil, err
	}
	if !o.decisions() {
		return l, nil
	}
	return newObserved(l, nil, name, o), nil
}

// New returns floodgate.New(store, alg) observed as Wrap observes it,
// except that its Allow and AllowN decide on the store's binding of alg
// directly, not through the Limiter of floodgate.New (Reserve, Wait and
// Apply do go through it): observing them adds the cost of the report
// only, not that of a second Limiter. The store binds alg twice, which
// the floodgate.Store contract allows: both bindings decide on the same
// state.
//
// New returns floodgate.New's Limiter itself when o observes no
// decisions, and its errors, and those of Wrap, otherwise.
func New(store floodgate.Store, alg floodgate.Algorithm, name string, o *Observer) (floodgate.Limiter, error) {
	if err := checkWrap(name, o); err != nil {
		return nil, err
	}
	l, err := floodgate.New(store, alg)
	if err != nil || !o.decisions() {
		return l, err
	}
	b, err := store.Bind(l.Algorithm())
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("%w: observe: %T bound %v to nothing", floodgate.ErrInvalidConfig, store, alg)
	}
	return newObserved(l, b, name, o), nil
}

// checkWrap validates the arguments of Wrap and New. A name is a metric
// label's value to the adapters, which must be UTF-8 (Prometheus refuses
// a scrape with another).
func checkWrap(name string, o *Observer) error {
	if name == "" {
		return fmt.Errorf("%w: observe: empty limiter name", floodgate.ErrInvalidConfig)
	}
	if err := CheckName(name); err != nil {
		return err
	}
	return o.Validate()
}

// observed is the Limiter of Wrap and New.
type observed struct {
	l floodgate.Limiter
	// b is, for New, the Bound that Allow and AllowN take on after
	// checking their arguments as floodgate.New's Limiter does (handing
	// those it refuses to l, for its errors); nil for Wrap.
	b     floodgate.Bound
	quota int64

	name       string
	limits     int
	onDecision func(context.Context, Decision)
	onTimed    func(context.Context, Decision)
	c          *counters // nil without a Tally
	// every selects the decisions timed: none when 0 (no function takes
	// a latency), all when 1<<32, otherwise those whose draw is below it.
	every uint64
}

func newObserved(l floodgate.Limiter, b floodgate.Bound, name string, o *Observer) *observed {
	limits := 0
	if ls, ok := l.Algorithm().(floodgate.Limits); ok {
		limits = len(ls)
	}
	w := &observed{l: l, b: b, quota: l.Policy().Quota, name: name, limits: limits,
		onDecision: o.OnDecision, onTimed: o.OnTimed}
	if o.Tally != nil {
		w.c = o.Tally.add(name, limits)
	}
	if o.OnDecision != nil || o.OnTimed != nil {
		w.every = o.latencyThreshold()
	}
	return w
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

// waitOutcome is outcome for Wait, where a deadline the units could not
// be admitted within is a denial.
func waitOutcome(err error) Outcome {
	switch {
	case err == nil:
		return Allowed
	case errors.Is(err, floodgate.ErrWaitExceedsDeadline):
		return Denied
	}
	return Failed
}

// count counts a decision of kind k on s, and marks s when the next
// decision on it is to be timed.
//
// The binding limit is counted before the decision, and Read loads a
// stripe's counts before its bindings: so a Read that has a decision's
// count has its binding too, and the denied takes it counts without a
// binding (a single algorithm's, under a composite's name) are never
// more than there were.
func (w *observed) count(s *stripe, k Kind, o Outcome, units uint64, d *floodgate.Decision) {
	if w.limits > 0 {
		w.bind(s, k, o, d)
	}
	v := s.count(k, o, units)
	// 0x9e3779b9 is 2^32 over the golden ratio: the hashes of
	// consecutive values spread evenly over [0, 2^32).
	if w.every != timeAll && uint64(uint32(v)*0x9e3779b9) < w.every {
		s.timeNext.Store(true)
	}
}

// bind counts the binding limit of a decided take of a Limits.
func (w *observed) bind(s *stripe, k Kind, o Outcome, d *floodgate.Decision) {
	if o != Failed && (k == KindTake || k == KindTakeUpTo) {
		s.bind(d.Binding, o, w.limits)
	}
}

// reports reports whether a decision timed when t0 >= 0 has an event to
// send.
func (w *observed) reports(t0 time.Duration) bool {
	return w.onDecision != nil || t0 >= 0 && w.onTimed != nil
}

// report sends the event of one decision.
func (w *observed) report(ctx context.Context, t0 time.Duration, key string, op floodgate.Op, check, wait bool, n int64, o Outcome, d *floodgate.Decision, err error) {
	e := Decision{Name: w.name, Key: key, Op: op, Check: check, Wait: wait, N: n, Outcome: o, Decision: *d, Limits: w.limits, Err: err, Latency: since(t0)}
	if w.onDecision != nil {
		w.onDecision(ctx, e)
	}
	if t0 >= 0 && w.onTimed != nil {
		w.onTimed(ctx, e)
	}
}

// end counts and reports a decision of Reserve, Wait or Apply.
func (w *observed) end(ctx context.Context, s *stripe, t0 time.Duration, key string, op floodgate.Op, check, wait bool, n int64, d *floodgate.Decision, err error) {
	o := outcome(d, err)
	if wait {
		o = waitOutcome(err)
	}
	if s != nil {
		w.count(s, kindOf(op, check, wait, n), o, unitsOf(op, n), d)
	}
	if w.reports(t0) {
		w.report(ctx, t0, key, op, check, wait, n, o, d, err)
	}
}

// Allow and AllowN are written out, not one calling the other nor through
// end: they are the hot path, and each call or copy of a Decision shows.

func (w *observed) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	s, t0 := w.begin()
	var d floodgate.Decision
	var err error
	if w.b != nil && key != "" && len(key) <= floodgate.MaxKeyLen && ctx.Err() == nil {
		d, err = w.b.Take(ctx, key, 1)
	} else {
		d, err = w.l.Allow(ctx, key)
	}
	o := outcome(&d, err)
	if s != nil {
		w.count(s, KindTake, o, 1, &d)
	}
	if w.reports(t0) {
		w.report(ctx, t0, key, floodgate.OpTake, false, false, 1, o, &d, err)
	}
	return d, err
}

func (w *observed) AllowN(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	s, t0 := w.begin()
	var d floodgate.Decision
	var err error
	if w.b != nil && key != "" && len(key) <= floodgate.MaxKeyLen && n >= 1 && n <= w.quota && ctx.Err() == nil {
		d, err = w.b.Take(ctx, key, n)
	} else {
		d, err = w.l.AllowN(ctx, key, n)
	}
	o := outcome(&d, err)
	if s != nil {
		w.count(s, KindTake, o, unitsOf(floodgate.OpTake, n), &d)
	}
	if w.reports(t0) {
		w.report(ctx, t0, key, floodgate.OpTake, false, false, n, o, &d, err)
	}
	return d, err
}

func (w *observed) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error) {
	s, t0 := w.begin()
	d, err := w.l.Reserve(ctx, key, n, maxDelay)
	w.end(ctx, s, t0, key, floodgate.OpTake, false, false, n, &d, err)
	return d, err
}

// Wait is not timed: its duration is mostly the sleep it was asked for.
func (w *observed) Wait(ctx context.Context, key string, n int64) error {
	var s *stripe
	if w.c != nil {
		s = w.c.stripe()
	}
	err := w.l.Wait(ctx, key, n)
	d := floodgate.Decision{Allowed: err == nil}
	w.end(ctx, s, -1, key, floodgate.OpTake, false, true, n, &d, err)
	return err
}

func (w *observed) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	s, t0 := w.begin()
	res, err := w.l.Apply(ctx, key, req)
	w.end(ctx, s, t0, key, req.Op, req.Check, false, req.N, &res.Decision, err)
	return res, err
}

func (w *observed) Policy() floodgate.Policy { return w.l.Policy() }

func (w *observed) Algorithm() floodgate.Algorithm { return w.l.Algorithm() }
