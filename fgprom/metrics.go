package fgprom

import (
	"fmt"
	"math"
	"regexp"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures New. A nil *Options, and the zero value, mean the
// defaults of each field.
type Options struct {
	// Namespace is the prefix of every metric's name, joined to it with
	// an underscore. The default is "floodgate". It must be a valid
	// Prometheus metric name.
	Namespace string

	// ConstLabels are added to every metric, with the same value on all
	// (a region, a deployment). The default is none. Their names must be
	// valid label names and differ from the metrics' own labels (limiter,
	// op, outcome, limit, store, node, policy, to, kind, reason, source,
	// partition, shedder, class). WARNING: a label whose value is a key
	// or anything else per user makes a series per user.
	ConstLabels prometheus.Labels

	// Buckets are the upper bounds, in seconds, of the histograms of
	// latency: decision_duration_seconds, store_call_duration_seconds and
	// lease_round_trip_duration_seconds. They must increase strictly. The
	// default is DefaultBuckets, which resolves 10µs (an in-process
	// decision) to 100ms (a slow Redis) and counts what is slower up to
	// 1s.
	Buckets []float64

	// HoldBuckets are the upper bounds, in seconds, of
	// inflight_hold_seconds, the time requests hold an in-flight slot.
	// They must increase strictly. The default is DefaultHoldBuckets, 1ms
	// to 5 minutes.
	HoldBuckets []float64
}

// DefaultBuckets are the default Options.Buckets, in seconds: 10µs to 1s.
var DefaultBuckets = []float64{
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1,
}

// DefaultHoldBuckets are the default Options.HoldBuckets, in seconds: 1ms
// to 5 minutes.
var DefaultHoldBuckets = []float64{
	1e-3, 5e-3, 10e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 30, 60, 300,
}

// decisionBuckets are the buckets of store_call_decisions: the decisions
// one round trip carried, 1 unbatched and up to a batching store's
// BatchSize.
var decisionBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// Metrics holds the Prometheus metrics of floodgate's events and is a
// prometheus.Collector of them: register it (reg.MustRegister(m)) and
// give Observer() to the components. Create one with New; the zero value
// is not usable. It is safe for concurrent use.
//
// One Metrics serves any number of components: their events carry their
// names, which label the series. Register a Metrics once per registry.
type Metrics struct {
	collectors []prometheus.Collector

	// tally counts the decisions of every limiter observed with an
	// Observer of m; Collect reads it into decisions, decisionUnits and
	// binding (decisions.go).
	tally         *observe.Tally
	decisions     *prometheus.Desc
	decisionUnits *prometheus.Desc
	binding       *prometheus.Desc

	decisionTime   *prometheus.HistogramVec
	storeCalls     *prometheus.CounterVec
	storeCallTime  *prometheus.HistogramVec
	storeCallSize  *prometheus.HistogramVec
	storeFailures  *prometheus.CounterVec
	breakerState   *prometheus.GaugeVec
	breakerChanges *prometheus.CounterVec
	leaseTrips     *prometheus.CounterVec
	leaseTime      *prometheus.HistogramVec
	leaseUnits     *prometheus.CounterVec
	leaseReturns   *prometheus.CounterVec
	leaseDecisions *prometheus.CounterVec
	adaptiveLimit  *prometheus.GaugeVec
	adaptiveReject *prometheus.CounterVec
	sheds          *prometheus.CounterVec
	acquires       *prometheus.CounterVec
	inflight       *prometheus.GaugeVec
	holds          *prometheus.HistogramVec

	// The series of each component, by name, made at its first event.
	limiterChildren  children[string, prometheus.Observer] // decisionTime
	storeChildren    children[string, *storeMetrics]
	leaseChildren    children[string, *leaseMetrics]
	adaptiveChildren children[string, *adaptiveMetrics]
	shedderChildren  children[string, *shedderMetrics]
	inflightChildren children[string, *inflightMetrics]
}

var _ prometheus.Collector = (*Metrics)(nil)

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// New returns the metrics of opts, registered nowhere. It returns an error
// matching floodgate.ErrInvalidConfig for an invalid Namespace, const
// label or bucket list.
func New(opts *Options) (*Metrics, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Namespace == "" {
		o.Namespace = "floodgate"
	}
	if !metricName.MatchString(o.Namespace) {
		return nil, fmt.Errorf("%w: prometheus: Namespace %q is not a valid metric name", floodgate.ErrInvalidConfig, o.Namespace)
	}
	for name := range o.ConstLabels {
		if !labelName.MatchString(name) || len(name) >= 2 && name[:2] == "__" {
			return nil, fmt.Errorf("%w: prometheus: ConstLabels: %q is not a valid label name", floodgate.ErrInvalidConfig, name)
		}
	}
	var err error
	if o.Buckets, err = buckets("Buckets", o.Buckets, DefaultBuckets); err != nil {
		return nil, err
	}
	if o.HoldBuckets, err = buckets("HoldBuckets", o.HoldBuckets, DefaultHoldBuckets); err != nil {
		return nil, err
	}

	m := &Metrics{tally: new(observe.Tally)}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(o.Namespace, "", name), help, labels, o.ConstLabels)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: o.Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels}, labels)
		m.collectors = append(m.collectors, v)
		return v
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: o.Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels}, labels)
		m.collectors = append(m.collectors, v)
		return v
	}
	histogram := func(name, help string, b []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: o.Namespace, Name: name, Help: help, ConstLabels: o.ConstLabels, Buckets: b}, labels)
		m.collectors = append(m.collectors, v)
		return v
	}

	m.decisions = desc("decisions_total",
		"Decisions of a limiter on a store wrapped by observe.Store, by op (take, take_up_to, settle, refund, check) and outcome (allowed, denied, error).",
		"limiter", "op", "outcome")
	m.decisionUnits = desc("decision_units_total",
		"Units asked for by the decisions of a limiter on a store wrapped by observe.Store (for settle, charged; for refund, given back), by op and outcome.",
		"limiter", "op", "outcome")
	m.decisionTime = histogram("decision_duration_seconds",
		"Time the decisions of a limiter on a store wrapped by observe.Store took, sampled: one decision in observe.Observer.LatencyEvery is timed. Use decisions_total for rates.",
		o.Buckets, "limiter")
	m.binding = desc("limit_binding_total",
		"Takes of a floodgate.Limits composite on a store wrapped by observe.Store, by the index of the limit that bound them (the denying one on a denial) and outcome.",
		"limiter", "limit", "outcome")
	m.storeCalls = counter("store_calls_total",
		"Round trips of a remote store to a node, by outcome (ok, timeout, error).",
		"store", "node", "outcome")
	m.storeCallTime = histogram("store_call_duration_seconds",
		"Time of a remote store's round trips to a node, from sending to the answer or the failure.",
		o.Buckets, "store", "node")
	m.storeCallSize = histogram("store_call_decisions",
		"Decisions carried by one round trip of a remote store: 1, or more in a batching store's pipeline.",
		decisionBuckets, "store", "node")
	m.storeFailures = counter("store_failures_total",
		"Decisions a store could not make on a node, by what its failure policy did (open, closed, local, error).",
		"store", "node", "policy")
	m.breakerState = gauge("breaker_state",
		"State of a node's circuit breaker: 0 closed, 1 half-open, 2 open. Set at the node's first round trip (closed) and at every change.",
		"store", "node")
	m.breakerChanges = counter("breaker_transitions_total",
		"Changes of a node's circuit breaker, by the state changed to (closed, half-open, open).",
		"store", "node", "to")
	m.leaseTrips = counter("lease_round_trips_total",
		"Lease round trips of a limiter on a lease.Store to the store under it, by outcome (granted: some units leased, denied: none, error).",
		"limiter", "outcome")
	m.leaseTime = histogram("lease_round_trip_duration_seconds",
		"Time of the lease round trips of a limiter on a lease.Store.",
		o.Buckets, "limiter")
	m.leaseUnits = counter("lease_units_total",
		"Units a limiter on a lease.Store leased from the store under it (kind leased) and gave back to it (kind returned, as many as that store took back).",
		"limiter", "kind")
	m.leaseReturns = counter("lease_returns_total",
		"Returns of unused units by a limiter on a lease.Store, by reason (expired, replaced, closed).",
		"limiter", "reason")
	m.leaseDecisions = counter("lease_decisions_total",
		"Decisions of a limiter on a lease.Store served from its local pools (source local) or that waited for a round trip (source waited): the local hit ratio.",
		"limiter", "source")
	m.adaptiveLimit = gauge("adaptive_limit",
		"Concurrency limit of an adaptive.Limiter, set at each change.",
		"limiter")
	m.adaptiveReject = counter("adaptive_rejections_total",
		"Requests an adaptive.Limiter rejected, by the partition they asked for (empty for none) and reason (limit, queue, timeout, canceled).",
		"limiter", "partition", "reason")
	m.sheds = counter("shed_total",
		"Requests a shed.Shedder shed, by criticality class.",
		"shedder", "class")
	m.acquires = counter("inflight_acquires_total",
		"Acquisitions of an inflight.Limiter, by outcome (allowed, denied, error).",
		"limiter", "outcome")
	m.inflight = gauge("inflight_requests",
		"Slots of an inflight.Limiter this process holds: its admitted acquisitions minus its releases.",
		"limiter")
	m.holds = histogram("inflight_hold_seconds",
		"Time the slots of an inflight.Limiter were held, from acquisition to release.",
		o.HoldBuckets, "limiter")

	// client_golang reports bad names and duplicate labels when a
	// collector is registered: do it once here, so that New returns the
	// error and registering with the user's registry cannot fail for it.
	if err := prometheus.NewPedanticRegistry().Register(m); err != nil {
		return nil, fmt.Errorf("%w: prometheus: %w", floodgate.ErrInvalidConfig, err)
	}
	m.initChildren()
	return m, nil
}

// buckets validates a bucket list, returning def for an empty one.
func buckets(field string, b, def []float64) ([]float64, error) {
	if len(b) == 0 {
		return def, nil
	}
	for i, v := range b {
		if math.IsNaN(v) || i > 0 && v <= b[i-1] {
			return nil, fmt.Errorf("%w: prometheus: %s must increase strictly: %v", floodgate.ErrInvalidConfig, field, b)
		}
	}
	return append([]float64(nil), b...), nil
}

// Describe sends the descriptors of every metric.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.decisions
	ch <- m.decisionUnits
	ch <- m.binding
	for _, c := range m.collectors {
		c.Describe(ch)
	}
}

// Collect sends the current value of every series. It reads the counts
// of every limiter observed with m's Observers (collectDecisions).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.collectDecisions(ch)
	for _, c := range m.collectors {
		c.Collect(ch)
	}
}

// Observer returns an Observer that feeds m: its Tally is m's, which
// counts the decisions of the limiters on a store wrapped by
// observe.Store with it, and its other functions, OnTimed included,
// receive the events of the components it is given to. Each call returns
// a new Observer, with the default LatencyEvery and FailureInterval,
// sharing m's Tally: set them before giving it to components, and give
// the same one to all of them.
//
// m counts the limiters observed with it by name (floodgate.Limiter.Name),
// for as long as m is reachable: each name (with its number of limits)
// holds 2.3 to 37 kilobytes of counters, by the number of processors,
// however many limiters are built under it. Name limiters from the
// configuration, never from a request.
func (m *Metrics) Observer() *observe.Observer {
	return &observe.Observer{
		Tally:         m.tally,
		OnTimed:       m.onTimed,
		OnStoreCall:   m.onStoreCall,
		OnFailures:    m.onFailures,
		OnBreaker:     m.onBreaker,
		OnLease:       m.onLease,
		OnReturn:      m.onReturn,
		OnLimitChange: m.onLimitChange,
		OnReject:      m.onReject,
		OnShed:        m.onShed,
		OnAcquire:     m.onAcquire,
		OnRelease:     m.onRelease,
	}
}
