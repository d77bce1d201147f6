package fgprom

import (
	"context"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/observe"
	"github.com/prometheus/client_golang/prometheus"
)

// How an event finds its series. Each kind of component has a
// copy-on-write map from its name to the children of its metrics
// (client_golang's per-label-set counters, gauges, histograms), and each
// event takes one lookup by a string, which hashes 3 to 4 times faster
// than a struct of the label values, then indexes an array by its small
// enums (an outcome, a breaker state). A second string label (a node, a
// reason, a partition) takes a second map.
//
// The series a component always has are made with it, at 0, when its
// first event arrives: a node's round trips by outcome, failures by
// policy, transitions by state, an in-flight limiter's acquisitions by
// outcome. A series that is born at its first increment hides that
// increment from increase() and rate() (their first sample is the
// baseline), so an alert on a first outage would miss it. Series of
// rarer label values (a reason, a partition) are made at their first
// event. A limiter's decisions are not events: they are counted by the
// Tally and read at Collect (decisions.go), and only the timed ones
// arrive here, for decision_duration_seconds.

// outcomes are the values of an outcome label: index 0 for a value that
// observe does not define, then Allowed, Denied and Failed.
const numOutcomes = 4

var outcomeNames = [numOutcomes]string{"unknown", observe.Allowed.String(), observe.Denied.String(), observe.Failed.String()}

func outcomeIndex(o observe.Outcome) int {
	if o >= observe.Allowed && o <= observe.Failed {
		return int(o)
	}
	return 0
}

var callOutcomeNames = [numOutcomes]string{"unknown", observe.CallOK.String(), observe.CallTimeout.String(), observe.CallError.String()}

func callOutcomeIndex(o observe.CallOutcome) int {
	if o >= observe.CallOK && o <= observe.CallError {
		return int(o)
	}
	return 0
}

// breakerStates are the values of the to label, in observe's order.
var breakerStates = [...]observe.BreakerState{observe.BreakerClosed, observe.BreakerOpen, observe.BreakerHalfOpen}

// breakerValue is breaker_state's value for s: 0 closed, 1 half-open, 2
// open, so that the gauge rises with the trouble (observe numbers the
// states otherwise).
func breakerValue(s observe.BreakerState) float64 {
	switch s {
	case observe.BreakerHalfOpen:
		return 1
	case observe.BreakerOpen:
		return 2
	}
	return 0
}

// policies are the values of Failures.Policy.
var policies = [...]string{"open", "closed", "local", "error"}

// newLimiter returns the decision_duration_seconds of limiter name. For
// a name Prometheus refuses (not UTF-8) it returns an Observer that drops
// the observations, since OnTimed runs on the decision's goroutine and
// WithLabelValues would panic there; the scrape reports the name, as
// collectDecisions fails on it.
func (m *Metrics) newLimiter(name string) prometheus.Observer {
	h, err := m.decisionTime.GetMetricWithLabelValues(name)
	if err != nil {
		return prometheus.ObserverFunc(func(float64) {})
	}
	return h
}

// nodeMetrics are the series of one node of a store.
type nodeMetrics struct {
	calls               [numOutcomes]prometheus.Counter
	duration, decisions prometheus.Observer
	state               prometheus.Gauge
	transitions         [len(breakerStates)]prometheus.Counter
	failures            [len(policies)]prometheus.Counter
	otherPolicies       children[string, prometheus.Counter]
}

// storeMetrics are the series of a remote store, by node.
type storeMetrics struct {
	nodes children[string, *nodeMetrics]
}

func (m *Metrics) newStore(store string) *storeMetrics {
	s := &storeMetrics{}
	s.nodes.make = func(node string) *nodeMetrics {
		n := &nodeMetrics{
			duration:  m.storeCallTime.WithLabelValues(store, node),
			decisions: m.storeCallSize.WithLabelValues(store, node),
			// A node's breaker is closed until it changes.
			state: m.breakerState.WithLabelValues(store, node),
		}
		for i := 1; i < numOutcomes; i++ {
			n.calls[i] = m.storeCalls.WithLabelValues(store, node, callOutcomeNames[i])
		}
		for i, st := range breakerStates {
			n.transitions[i] = m.breakerChanges.WithLabelValues(store, node, st.String())
		}
		for i, p := range policies {
			n.failures[i] = m.storeFailures.WithLabelValues(store, node, p)
		}
		n.otherPolicies.make = func(p string) prometheus.Counter {
			return m.storeFailures.WithLabelValues(store, node, p)
		}
		return n
	}
	return s
}

func (m *Metrics) node(store, node string) *nodeMetrics {
	return m.storeChildren.get(store).nodes.get(node)
}

// leaseMetrics are the series of a limiter on a lease.Store.
type leaseMetrics struct {
	trips                           [3]prometheus.Counter // granted, denied, error
	duration                        prometheus.Observer
	leased, returned, local, waited prometheus.Counter
	returns                         children[string, prometheus.Counter] // by reason
}

var leaseOutcomes = [3]string{"granted", "denied", "error"}

func (m *Metrics) newLease(name string) *leaseMetrics {
	l := &leaseMetrics{
		duration: m.leaseTime.WithLabelValues(name),
		leased:   m.leaseUnits.WithLabelValues(name, "leased"),
		returned: m.leaseUnits.WithLabelValues(name, "returned"),
		local:    m.leaseDecisions.WithLabelValues(name, "local"),
		waited:   m.leaseDecisions.WithLabelValues(name, "waited"),
	}
	for i, o := range leaseOutcomes {
		l.trips[i] = m.leaseTrips.WithLabelValues(name, o)
	}
	l.returns.make = func(reason string) prometheus.Counter {
		return m.leaseReturns.WithLabelValues(name, reason)
	}
	return l
}

// adaptiveMetrics are the series of an adaptive.Limiter.
type adaptiveMetrics struct {
	limit      prometheus.Gauge
	rejections children[rejection, prometheus.Counter]
}

// rejection is the label tuple of an adaptive rejection.
type rejection struct{ partition, reason string }

func (m *Metrics) newAdaptive(name string) *adaptiveMetrics {
	a := &adaptiveMetrics{limit: m.adaptiveLimit.WithLabelValues(name)}
	a.rejections.make = func(r rejection) prometheus.Counter {
		return m.adaptiveReject.WithLabelValues(name, r.partition, r.reason)
	}
	return a
}

// shedderMetrics are the series of a shed.Shedder, by class.
type shedderMetrics struct {
	classes children[string, prometheus.Counter]
}

func (m *Metrics) newShedder(name string) *shedderMetrics {
	s := &shedderMetrics{}
	s.classes.make = func(class string) prometheus.Counter {
		return m.sheds.WithLabelValues(name, class)
	}
	return s
}

// inflightMetrics are the series of an inflight.Limiter.
type inflightMetrics struct {
	acquires [numOutcomes]atomic.Pointer[counter]
	inflight prometheus.Gauge
	hold     prometheus.Observer
	m        *Metrics
	name     string
}

// counter holds a Counter where an atomic.Pointer needs a struct.
type counter struct{ prometheus.Counter }

func (m *Metrics) newInflight(name string) *inflightMetrics {
	f := &inflightMetrics{m: m, name: name, inflight: m.inflight.WithLabelValues(name), hold: m.holds.WithLabelValues(name)}
	for o := observe.Allowed; o <= observe.Failed; o++ {
		f.acquire(int(o))
	}
	return f
}

func (f *inflightMetrics) acquire(o int) prometheus.Counter {
	slot := &f.acquires[o]
	if c := slot.Load(); c != nil {
		return c.Counter
	}
	c := &counter{f.m.acquires.WithLabelValues(f.name, outcomeNames[o])}
	if !slot.CompareAndSwap(nil, c) {
		return slot.Load().Counter
	}
	return c.Counter
}

func (m *Metrics) initChildren() {
	m.limiterChildren.make = m.newLimiter
	m.storeChildren.make = m.newStore
	m.leaseChildren.make = m.newLease
	m.adaptiveChildren.make = m.newAdaptive
	m.shedderChildren.make = m.newShedder
	m.inflightChildren.make = m.newInflight
}

func (m *Metrics) onStoreCall(_ context.Context, e observe.StoreCall) {
	n := m.node(e.Name, e.Node)
	i := callOutcomeIndex(e.Outcome)
	c := n.calls[i]
	if c == nil { // an outcome observe does not define
		c = m.storeCalls.WithLabelValues(e.Name, e.Node, e.Outcome.String())
	}
	c.Inc()
	n.duration.Observe(e.Latency.Seconds())
	if e.Decisions > 0 {
		n.decisions.Observe(float64(e.Decisions))
	}
}

func (m *Metrics) onFailures(_ context.Context, e observe.Failures) {
	if e.Count <= 0 {
		return
	}
	n := m.node(e.Name, e.Node)
	for i, p := range policies {
		if e.Policy == p {
			n.failures[i].Add(float64(e.Count))
			return
		}
	}
	n.otherPolicies.get(e.Policy).Add(float64(e.Count))
}

func (m *Metrics) onBreaker(_ context.Context, e observe.BreakerChange) {
	n := m.node(e.Name, e.Node)
	if int(e.To) < len(n.transitions) {
		n.transitions[e.To].Inc()
	} else {
		m.breakerChanges.WithLabelValues(e.Name, e.Node, e.To.String()).Inc()
	}
	n.state.Set(breakerValue(e.To))
}

func (m *Metrics) onLease(_ context.Context, e observe.Lease) {
	l := m.leaseChildren.get(e.Name)
	switch {
	case e.Err != nil:
		l.trips[2].Inc()
	case e.Granted <= 0:
		l.trips[1].Inc()
	default:
		l.trips[0].Inc()
		l.leased.Add(float64(e.Granted))
	}
	if e.Latency > 0 {
		l.duration.Observe(e.Latency.Seconds())
	}
	if e.Local > 0 {
		l.local.Add(float64(e.Local))
	}
	if e.Waited > 0 {
		l.waited.Add(float64(e.Waited))
	}
}

func (m *Metrics) onReturn(_ context.Context, e observe.Return) {
	l := m.leaseChildren.get(e.Name)
	l.returns.get(e.Reason).Inc()
	if e.Granted > 0 {
		l.returned.Add(float64(e.Granted))
	}
}

func (m *Metrics) onLimitChange(_ context.Context, e observe.LimitChange) {
	m.adaptiveChildren.get(e.Name).limit.Set(float64(e.New))
}

func (m *Metrics) onReject(_ context.Context, e observe.Reject) {
	m.adaptiveChildren.get(e.Name).rejections.get(rejection{e.Partition, e.Reason}).Inc()
}

func (m *Metrics) onShed(_ context.Context, e observe.Shed) {
	m.shedderChildren.get(e.Name).classes.get(e.Class).Inc()
}

func (m *Metrics) onAcquire(_ context.Context, e observe.Acquire) {
	f := m.inflightChildren.get(e.Name)
	f.acquire(outcomeIndex(e.Outcome)).Inc()
	if e.Outcome == observe.Allowed {
		f.inflight.Inc()
	}
}

func (m *Metrics) onRelease(_ context.Context, e observe.Release) {
	f := m.inflightChildren.get(e.Name)
	f.inflight.Dec()
	if e.Held > 0 {
		f.hold.Observe(e.Held.Seconds())
	}
}
