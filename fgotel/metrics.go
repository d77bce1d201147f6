package fgotel

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/floodgate-go/floodgate/observe"
)

// ScopeName is the instrumentation scope of the Meter that New creates:
// this module's import path, as OpenTelemetry asks of instrumentation
// libraries.
const ScopeName = "github.com/floodgate-go/floodgate/fgotel"

// LatencyBuckets returns the advisory bucket boundaries, in seconds, of
// the latency histograms (decisions, store round trips, lease refills):
// 10µs to 100ms in steps of 1, 2.5 and 5, so that an in-process decision
// (tens of microseconds at most), a loopback Redis round trip (about
// 100µs) and a store's timeout (redisstore's default is 20ms) each fall
// in a bucket of their own. Slower calls land in the overflow bucket.
// It returns a new slice each time.
func LatencyBuckets() []float64 { return append([]float64(nil), latencyBuckets...) }

// WaitBuckets returns the advisory bucket boundaries, in seconds, of the
// histograms of waits and holds (a reservation's delay, an in-flight
// slot's hold), which last as long as the caller's work: 1ms to 60s. It
// returns a new slice each time.
func WaitBuckets() []float64 { return append([]float64(nil), waitBuckets...) }

var latencyBuckets = []float64{
	0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1,
}

var waitBuckets = []float64{
	0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05,
	0.1, 0.25, 0.5,
	1, 2.5, 5,
	10, 30, 60,
}

// Options configure New. A nil *Options means the defaults of every field.
type Options struct {
	// MeterProvider creates the instruments. The default is the global
	// provider, otel.GetMeterProvider(), which forwards to the provider
	// set later with otel.SetMeterProvider.
	MeterProvider metric.MeterProvider

	// NoSpanEvents turns off the "floodgate.decision" event on a
	// recording span of the decision's context: Metrics.Observer then
	// leaves OnDecision nil, so a decision is counted in the Tally and
	// no event is built for it. The default is false: decisions appear on
	// their spans, and every observed decision pays for its OnDecision
	// event, whether or not its context has a recording span: about 20
	// ns more on memstore, where counting it costs 12 to 15 (README.md
	// has the figures). Set it when the decisions' spans are not wanted.
	NoSpanEvents bool
}

// Metrics records floodgate's events as OpenTelemetry metrics. Build it
// with New and give its Observer to the components to watch.
//
// A Metrics lives as long as its MeterProvider: the provider's callback
// that reads the decision counts holds it, and with it the counters of
// every limiter its Observers were given to. Build one per process (or
// per MeterProvider), not one per limiter or request; shutting the
// MeterProvider down ends the callback.
//
// A Metrics is safe for concurrent use; its zero value is not usable.
type Metrics struct {
	noSpanEvents bool

	// Decisions of the limiters on a store wrapped by observe.Store:
	// counted in tally, which the callback of requests and units reads
	// at each collection; the timed ones recorded by OnTimed.
	tally        *observe.Tally
	requests     metric.Int64ObservableCounter
	units        metric.Int64ObservableCounter
	decisionTime metric.Float64Histogram
	queueTime    metric.Float64Histogram
	limiters     cache[string, *limiterAttrs]

	// A store's round trips, failures and breakers.
	storeDuration     metric.Float64Histogram
	storeDecisions    metric.Int64Counter
	storeFailures     metric.Int64Counter
	breakerChanges    metric.Int64Counter
	breakerState      metric.Int64Gauge
	storeCallAttrs    cache[storeCallKey, *storeCallAttrs]
	storeFailureAttrs cache[storeFailureKey, *attrs]
	nodes             cache[nodeKey, *node]

	// The refills and returns of the limiters on a lease.Store.
	leaseDuration  metric.Float64Histogram
	leaseRequested metric.Int64Counter
	leaseGranted   metric.Int64Counter
	leaseDecisions metric.Int64Counter
	leaseReleased  metric.Int64Counter
	leaseRefunded  metric.Int64Counter
	leaseAttrs     cache[leaseKey, *leaseAttrs]
	returnAttrs    cache[returnKey, *attrs]

	// adaptive.Limiter, shed.Shedder.
	adaptiveLimit    metric.Int64Gauge
	adaptiveRejected metric.Int64Counter
	shed             metric.Int64Counter
	limitAttrs       cache[string, *attrs]
	rejectAttrs      cache[rejectKey, *attrs]
	shedAttrs        cache[classKey, *attrs]

	// inflight.Limiter.
	inflightRequests metric.Int64Counter
	inflightActive   metric.Int64UpDownCounter
	inflightHeld     metric.Float64Histogram
	acquireAttrs     cache[acquireKey, *acquireAttrs]
	releaseAttrs     cache[releaseKey, *releaseAttrs]
}

// New creates the instruments of a Metrics on a Meter of opts'
// MeterProvider named ScopeName, and registers on it the callback that
// reads the decision counts. It returns the MeterProvider's error if it
// refuses an instrument or the callback.
func New(opts *Options) (*Metrics, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	meter := o.MeterProvider.Meter(ScopeName)
	m := &Metrics{noSpanEvents: o.NoSpanEvents, tally: new(observe.Tally)}
	b := builder{meter: meter}

	m.requests = b.observableCounter("floodgate.rate_limiting.requests", "{request}",
		"Decisions of a limiter on a store wrapped by observe.Store, by result.")
	m.units = b.observableCounter("floodgate.rate_limiting.units", "{unit}",
		"Units asked for by the decisions of a limiter on a store wrapped by observe.Store (costs), by result; settlements are not counted.")
	m.decisionTime = b.histogram("floodgate.rate_limiting.decision.duration", latencyBuckets,
		"Duration of the decisions of a limiter that were timed (one in observe.Observer.LatencyEvery).")
	m.queueTime = b.histogram("floodgate.rate_limiting.request.time_in_queue", waitBuckets,
		"Delay of the timed decisions (one in observe.Observer.LatencyEvery) admitted to wait before proceeding (reservations, shaping).")

	m.storeDuration = b.histogram("db.client.operation.duration", latencyBuckets,
		"Duration of a store's round trips to its server, successful or not.")
	m.storeDecisions = b.counter("floodgate.store.decisions", "{decision}",
		"Decisions carried by a store's round trips (more than the round trips when it batches).")
	m.storeFailures = b.counter("floodgate.store.failures", "{decision}",
		"Decisions a store could not make, by the failure policy that made them instead.")
	m.breakerChanges = b.counter("floodgate.store.breaker.transitions", "{transition}",
		"Changes of state of a store's circuit breakers.")
	m.breakerState = b.gauge("floodgate.store.breaker.state", "1",
		"State of a store's circuit breaker per node: 1 for its current state, 0 for the others.")

	m.leaseDuration = b.histogram("floodgate.lease.refill.duration", latencyBuckets,
		"Duration of the lease round trips of a limiter on a lease.Store to the store under it.")
	m.leaseRequested = b.counter("floodgate.lease.requested_units", "{unit}",
		"Units a limiter on a lease.Store asked the store under it for.")
	m.leaseGranted = b.counter("floodgate.lease.granted_units", "{unit}",
		"Units the store under a lease.Store leased to a limiter on it.")
	m.leaseDecisions = b.counter("floodgate.lease.decisions", "{decision}",
		"Decisions of a limiter on a lease.Store, by whether its local pool served them or they waited for a refill.")
	m.leaseReleased = b.counter("floodgate.lease.released_units", "{unit}",
		"Unused units a limiter on a lease.Store gave up.")
	m.leaseRefunded = b.counter("floodgate.lease.refunded_units", "{unit}",
		"Unused units the store under a lease.Store took back from a limiter on it.")

	m.adaptiveLimit = b.gauge("floodgate.adaptive.limit", "{request}",
		"Concurrency limit of an adaptive limiter.")
	m.adaptiveRejected = b.counter("floodgate.adaptive.rejected_requests", "{request}",
		"Requests an adaptive limiter rejected.")
	m.shed = b.counter("floodgate.shed.shed_requests", "{request}",
		"Requests a load shedder shed.")

	m.inflightRequests = b.counter("floodgate.inflight.requests", "{request}",
		"Acquisitions of an in-flight limiter, by result.")
	m.inflightActive = b.upDownCounter("floodgate.inflight.active_requests", "{request}",
		"Slots of an in-flight limiter held by this process.")
	m.inflightHeld = b.histogram("floodgate.inflight.hold.duration", waitBuckets,
		"Duration a slot of an in-flight limiter was held.")

	if b.err != nil {
		return nil, fmt.Errorf("fgotel: %w", b.err)
	}
	// The Registration is not kept: the callback lasts as long as the
	// MeterProvider (see Metrics), and the provider's Shutdown ends it.
	if _, err := meter.RegisterCallback(m.observeTally, m.requests, m.units); err != nil {
		return nil, fmt.Errorf("fgotel: callback of floodgate.rate_limiting.requests: %w", err)
	}
	return m, nil
}

// Observer returns a new Observer whose every function records into m.
// For the decisions of the limiters on a store wrapped by observe.Store
// with it, it sets Tally to m's one Tally, shared by every Observer of m,
// which the decision counters read at each collection; OnTimed, which
// records the timed decisions' duration and delay; and, unless
// Options.NoSpanEvents, OnDecision, which only adds the decision's event
// to a recording span.
// Its LatencyEvery and FailureInterval are zero (the defaults); set them
// on the returned Observer before giving it to a component, for example
// LatencyEvery 1 to time every decision.
func (m *Metrics) Observer() *observe.Observer {
	o := &observe.Observer{
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
	if !m.noSpanEvents {
		o.OnDecision = m.onDecision
	}
	return o
}

// builder creates instruments on one Meter and keeps every error, so
// that New checks once.
type builder struct {
	meter metric.Meter
	err   error
}

func (b *builder) keep(name string, err error) {
	if err != nil {
		b.err = errors.Join(b.err, fmt.Errorf("%s: %w", name, err))
	}
}

func (b *builder) counter(name, unit, desc string) metric.Int64Counter {
	c, err := b.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(name, err)
	return c
}

// observableCounter creates a counter whose values a callback observes.
func (b *builder) observableCounter(name, unit, desc string) metric.Int64ObservableCounter {
	c, err := b.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(name, err)
	return c
}

func (b *builder) upDownCounter(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := b.meter.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(name, err)
	return c
}

func (b *builder) gauge(name, unit, desc string) metric.Int64Gauge {
	g, err := b.meter.Int64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(name, err)
	return g
}

// histogram creates a histogram of durations in seconds.
func (b *builder) histogram(name string, buckets []float64, desc string) metric.Float64Histogram {
	h, err := b.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(buckets...))
	b.keep(name, err)
	return h
}
