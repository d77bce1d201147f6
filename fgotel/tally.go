package fgotel

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/metric"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// observeTally is the callback of the decision counters
// (floodgate.rate_limiting.requests and .units): at each collection it
// reads m's Tally and observes its cumulative counts under the attributes
// the decisions had when these were synchronous counters fed one event at
// a time: the limiter's name, the result, the op (take for the Action
// take, settle for settle and refund), check for a check-only step (under
// op take, since the Tally counts checks of every Op as one Action), and
// the binding limit of a composite's denials. The Tally has no error
// type, so failed decisions carry none here; the span event and the
// decision-duration histogram have it.
//
// Every point it observes is a sum of counters that only grow, so each
// series only grows, except the one computed as a difference, which
// limiterAttrs.unbound keeps from going back.
func (m *Metrics) observeTally(_ context.Context, o metric.Observer) error {
	counts := m.tally.Read()
	for i := range counts {
		m.observeCounts(o, &counts[i])
	}
	return nil
}

// observeCounts observes the counts of one limiter name.
func (m *Metrics) observeCounts(o metric.Observer, c *observe.Counts) {
	l := m.limiter(c.Name)
	d, u := &c.Decisions, &c.Units
	for out := observe.Allowed; out <= observe.Failed; out++ {
		take := d[observe.ActionTake][out]
		takeUpTo := d[observe.ActionTakeUpTo][out]
		if c.Limits > 0 && out == observe.Denied {
			// The Tally counts the binding limit of takes (Waits
			// included) and take_up_to steps together: a composite's
			// denials of both are counted by binding limit under op take.
			take = m.observeBinding(o, l, c)
			takeUpTo = 0
		}
		m.observeSeries(o, l, c.Name, out, floodgate.OpTake, false, take, u[observe.ActionTake][out])
		m.observeSeries(o, l, c.Name, out, floodgate.OpTakeUpTo, false, takeUpTo, u[observe.ActionTakeUpTo][out])
		// Settlements' units are not counted: charges and refunds would
		// add up to a figure that is neither.
		m.observeSeries(o, l, c.Name, out, floodgate.OpSettle, false, d[observe.ActionSettle][out]+d[observe.ActionRefund][out], 0)
		m.observeSeries(o, l, c.Name, out, floodgate.OpTake, true, d[observe.ActionCheck][out], u[observe.ActionCheck][out])
	}
}

// observeBinding observes the denials of a composite's takes by binding
// limit, and returns the denied takes that bound on no limit: those of a
// single-algorithm limiter observed under the composite's name.
//
// Those are the denied takes counted minus those counted by binding. A
// Read that has a decision's count has its binding (observe counts the
// binding first), so the difference is never more than the decisions
// without one; it may be fewer, by the bindings of decisions whose count
// this Read missed, and what l.unbound already reported is a floor, so
// that the series never goes back.
func (m *Metrics) observeBinding(o metric.Observer, l *limiterAttrs, c *observe.Counts) uint64 {
	var bound uint64
	for i, b := range c.Binding {
		if n := b[observe.Denied]; n > 0 {
			a := l.lookup(decisionKey{name: c.Name, outcome: observe.Denied, op: floodgate.OpTake, binding: i})
			o.ObserveInt64(m.requests, clamp(n), a.obs...)
			bound += n
		}
	}
	asked := c.Decisions[observe.ActionTake][observe.Denied] + c.Decisions[observe.ActionTakeUpTo][observe.Denied]
	if asked <= bound {
		return l.unbound.Load()
	}
	return l.raiseUnbound(asked - bound)
}

// raiseUnbound raises l.unbound to v unless it is higher, and returns it.
func (l *limiterAttrs) raiseUnbound(v uint64) uint64 {
	for {
		old := l.unbound.Load()
		if v <= old || l.unbound.CompareAndSwap(old, v) {
			return max(old, v)
		}
	}
}

// observeSeries observes the requests and units of one label tuple; a
// tuple without decisions has no series yet, as when the counters were
// synchronous.
func (m *Metrics) observeSeries(o metric.Observer, l *limiterAttrs, name string, out observe.Outcome, op floodgate.Op, check bool, requests, units uint64) {
	if requests == 0 && units == 0 {
		return
	}
	a := l.lookup(decisionKey{name: name, outcome: out, op: op, check: check, binding: -1})
	if requests > 0 {
		o.ObserveInt64(m.requests, clamp(requests), a.obs...)
	}
	if units > 0 {
		o.ObserveInt64(m.units, clamp(units), a.obs...)
	}
}

// clamp converts a count to the int64 of the instruments: a sum of
// units could pass math.MaxInt64 before it wraps a uint64.
func clamp(n uint64) int64 { return int64(min(n, math.MaxInt64)) }
