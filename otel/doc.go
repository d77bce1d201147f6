// Package fgotel turns floodgate's observe events into OpenTelemetry
// metrics, and a limiter's decisions into events on the caller's trace
// span.
//
// The package lives in its own module,
// github.com/floodgate-go/floodgate/otel, so that floodgate itself
// depends on no OpenTelemetry code. Its name is fgotel, not otel, so that
// it does not shadow go.opentelemetry.io/otel in the files that use both
// (the ones that set up a MeterProvider do); import it as
//
//	import fgotel "github.com/floodgate-go/floodgate/otel"
//
// # Use
//
// New builds the instruments on a MeterProvider (by default the global
// one, otel.GetMeterProvider()), and Metrics.Observer returns an
// *observe.Observer whose every function records into them. Give that
// Observer to observe.Wrap for a limiter's decisions and to the Observer
// field of the components' options (redisstore, lease, adaptive, shed,
// inflight) for the rest; one Metrics serves them all, since every event
// names its component.
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
// the retry-after, and for a composite the binding limit. An event rather
// than span attributes because a span often sees several decisions (a
// global and a per-route limiter, a lease refill), and attributes would
// overwrite each other. A span that is not recording, or none, costs one
// interface call and allocates nothing. [Options].NoSpanEvents turns the
// events off.
//
// # Costs
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
