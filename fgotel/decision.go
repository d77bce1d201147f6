package fgotel

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// decisionKey is the label tuple of a decision.
type decisionKey struct {
	name    string
	outcome observe.Outcome
	op      floodgate.Op
	check   bool
	// binding is the index of the denying limit of a composite, -1 for
	// every other decision: which limit denies is what an operator tunes,
	// while the binding limit of an admission changes with every request
	// and would only split the counts.
	binding int
	errType string
}

// limiterAttrs are the attribute sets of one limiter name's decisions.
// Most decisions carry neither an error nor a denying limit: their sets
// sit in an array indexed by outcome, op and check, so that finding one
// hashes the name only; the others are in a map by their whole tuple.
type limiterAttrs struct {
	plain [3][3][2]atomic.Pointer[attrs]
	other cache[decisionKey, *attrs]
	// unbound is the most denials of the name's takes without a binding
	// limit that the requests counter has reported (observeTally): the
	// counter never goes back below it.
	unbound atomic.Uint64
}

// limiter returns the attribute sets of the decisions of the limiters
// named name.
func (m *Metrics) limiter(name string) *limiterAttrs {
	l, ok := m.limiters.load(name)
	if !ok {
		l = m.limiters.add(name, &limiterAttrs{})
	}
	return l
}

// lookup returns the attribute set of k, a decision of l's limiter.
func (l *limiterAttrs) lookup(k decisionKey) *attrs {
	if k.binding < 0 && k.errType == "" && k.outcome >= observe.Allowed && k.outcome <= observe.Failed && k.op <= floodgate.OpSettle {
		check := 0
		if k.check {
			check = 1
		}
		p := &l.plain[k.outcome-observe.Allowed][k.op][check]
		if a := p.Load(); a != nil {
			return a
		}
		p.CompareAndSwap(nil, buildDecision(k))
		return p.Load()
	}
	a, ok := l.other.load(k)
	if !ok {
		a = l.other.add(k, buildDecision(k))
	}
	return a
}

func buildDecision(k decisionKey) *attrs {
	kv := []attribute.KeyValue{
		keyLimiter.String(k.name),
		keyResult.String(k.outcome.String()),
		keyOp.String(opName(k.op)),
	}
	if k.check {
		kv = append(kv, keyCheck.Bool(true))
	}
	if k.binding >= 0 {
		kv = append(kv, keyBinding.Int(k.binding))
	}
	if k.errType != "" {
		kv = append(kv, keyErrorType.String(k.errType))
	}
	return newAttrs(kv...)
}

// onTimed is Observer.OnTimed: it records the duration of a timed
// decision and, when it was admitted with a delay (a Reserve, a Wait, a
// leaky bucket's shaping), that delay, under the decision's whole label
// tuple, error.type and the denying limit of a composite included. Both
// histograms see the timed decisions only (one in
// Observer.LatencyEvery), a sample chosen whatever the decision's delay:
// their quantiles are the decisions', their counts are not the
// decisions' number.
func (m *Metrics) onTimed(ctx context.Context, d observe.DecisionEvent) {
	k := decisionKey{name: d.Name, outcome: d.Outcome, op: d.Op, check: d.Check, binding: -1}
	switch {
	case d.Outcome == observe.Failed:
		k.errType = errorType(d.Err)
	case d.Outcome == observe.Denied && d.Limits > 0:
		k.binding = d.Decision.Binding
	}
	a := m.limiter(d.Name).lookup(k)
	m.decisionTime.Record(ctx, d.Latency.Seconds(), a.rec...)
	if d.Outcome == observe.Allowed && d.Decision.Delay > 0 {
		m.queueTime.Record(ctx, d.Decision.Delay.Seconds(), a.rec...)
	}
}

// onDecision is Observer.OnDecision, set unless Options.NoSpanEvents: it
// adds the decision's event to the caller's span when that span records,
// and does nothing else (the Tally counts the decision, OnTimed times
// it), since it runs for every decision.
func (m *Metrics) onDecision(ctx context.Context, d observe.DecisionEvent) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		addDecisionEvent(span, &d)
	}
}

// addDecisionEvent adds the "floodgate.decision" event to span. It runs
// only for a recording span, whose SDK copies the attributes anyway: the
// slice is sized for the most attributes an event has, so that it is
// built without growing.
func addDecisionEvent(span trace.Span, d *observe.DecisionEvent) {
	kv := make([]attribute.KeyValue, 0, 10)
	kv = append(kv,
		keyLimiter.String(d.Name),
		keyResult.String(d.Outcome.String()),
		keyOp.String(opName(d.Op)),
		keyUnits.Int64(d.N),
	)
	if d.Check {
		kv = append(kv, keyCheck.Bool(true))
	}
	if d.Outcome == observe.Failed {
		kv = append(kv, keyErrorType.String(errorType(d.Err)))
	} else {
		dec := &d.Decision
		kv = append(kv, keyLimit.Int64(dec.Limit), keyRemaining.Int64(dec.Remaining))
		if dec.Delay > 0 {
			kv = append(kv, keyDelay.Float64(dec.Delay.Seconds()))
		}
		if dec.RetryAfter > 0 {
			kv = append(kv, keyRetryAfter.Float64(dec.RetryAfter.Seconds()))
		}
		if d.Limits > 0 {
			kv = append(kv, keyBinding.Int(dec.Binding))
		}
	}
	span.AddEvent("floodgate.decision", trace.WithAttributes(kv...))
}
