// Package fgotel turns floodgate's observe events into OpenTelemetry
// metrics, and a limiter's decisions into events on the caller's trace
// span.
//
// The package lives in its own module,
// github.com/floodgate-go/floodgate/fgotel, so that floodgate itself
// depends on no OpenTelemetry code. Its name is fgotel, not otel, so that
// it does not shadow go.opentelemetry.io/otel in the files that use both
// (the ones that set up a MeterProvider do); import it as
//
//	import "github.com/floodgate-go/floodgate/fgotel"
//
// # Use
//
// New builds the instruments on a MeterProvider (by default the global
// one, otel.GetMeterProvider()), and Metrics.Observer returns an
// *observe.Observer whose every function records into them. Give that
// Observer to observe.Store, which wraps the store of the limiters whose
// decisions are to be counted (under each limiter's name,
// floodgate.Limiter.Name), and to the Observer field of the components'
// options (redisstore, lease, adaptive, shed, inflight) for the rest; one
// Metrics serves them all, since every event names its component. A
// Metrics lives as long as its MeterProvider (see [Metrics]): build one
// per provider.
//
//	m, err := fgotel.New(nil)
//	obs := m.Observer()
//	store, err := observe.Store(redis, obs)
//	lim, err := floodgate.New(store, alg, &floodgate.Options{Name: "api"})
//
// # Instruments
//
// The names follow the closest OpenTelemetry semantic conventions: the
// ASP.NET Core rate-limiting metrics (aspnetcore.rate_limiting.*) for
// requests, holds and queueing, under a floodgate. prefix because
// floodgate is not ASP.NET Core, and the database client metrics
// (db.client.operation.duration, db.system.name, server.address,
// error.type) as they are for a store's round trips to Redis. Attributes
// are the component's name, the outcome, the step, the node, the failure
// policy, the criticality class: never the key, which is a user (a series
// per user is a time-series database's outage). README.md lists every
// instrument with its type, unit, attributes and the convention it
// follows.
//
// A limiter's decisions are counted in an [observe.Tally] that every
// Observer of one Metrics shares, not pushed to the SDK one at a time:
// floodgate.rate_limiting.requests and floodgate.rate_limiting.units are
// asynchronous counters that one callback feeds from the Tally's counts
// at each collection, so that counting a decision costs an atomic
// addition instead of an event and two SDK measurements. They export the
// cumulative sums their synchronous predecessors did, under the same
// names and attributes, except that the Tally imposes four changes:
// failed decisions carry no error.type (the Tally counts them without
// their error; the histograms and span events keep it), a check-only
// step is op take whatever its Op, a composite's denials of takes and
// take_up_to steps are both op take by binding limit, and units carry no
// binding limit. The decision
// histograms (duration, time in queue) record the timed decisions only,
// one in observe.Observer.LatencyEvery, through OnTimed: a sample.
//
// Durations are float64 histograms in seconds. Decision, store and lease
// round-trip latencies get the advisory bucket boundaries
// [LatencyBuckets], 10µs to 100ms; waits and holds, which last as long as
// the caller's work, get [WaitBuckets], 1ms to 60s. A View of the SDK
// overrides either.
//
// # Traces
//
// OnDecision adds one event, "floodgate.decision", to the span of the
// decision's context when that span is recording: the limiter's name, the
// result, the step, the units, the limit and what remains, the delay or
// the retry-after, the error type of a failure, and for a composite the
// binding limit. A Wait's event is its take's, with the Decision of its
// reservation. An event rather than span attributes because a span
// often sees several decisions (a global and a per-route limiter, a lease
// refill), and attributes would overwrite each other. OnDecision does
// nothing else: the counts are the Tally's. A span that is not recording,
// or none, costs one interface call and allocates nothing, but
// package observe builds the event and calls OnDecision for every
// decision, span or not. [Options].NoSpanEvents turns the events off and
// leaves OnDecision nil, which saves that.
//
// # Costs
//
// On memstore (BenchmarkObserverAllow; README.md has the run, taken with
// observe.New, which observe.Store replaced: observe.Store adds about 10
// ns to each figure, the layer of a Store around the store), a decision
// observed with a Metrics' Observer allocates nothing and costs, more
// than a plain one (70 ns): 12 to 15 ns with NoSpanEvents (the Tally's
// addition, and one decision in 64 timed and recorded in the
// histogram); 32 to 37 ns with span events on and no recording span in
// the context, since package observe builds every decision's event for
// OnDecision; about 1.1µs and 4 allocations, in the trace SDK, when the
// span records; about 300 ns with LatencyEvery 1 (two clock readings and
// a histogram record each). A collection reads
// the Tally once and observes one point per series: about 8µs for one
// limiter name, 105µs for 20, whatever the traffic.
//
// Every attribute set is built once per label tuple (component name,
// outcome, step, node, ...) and kept in a copy-on-write map that events
// read without a lock; an event looks its set up and hands the SDK a
// precomputed option slice, so this package allocates nothing per event.
// What the SDK does with a measurement is the SDK's: see the benchmark in
// bench_test.go and README.md for the numbers. Memory grows with the
// number of distinct label tuples, which is bounded by the configuration
// (names, nodes, classes), never by traffic or keys.
package fgotel
