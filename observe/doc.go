// Package observe is how floodgate tells operators what it does: one
// Observer, a struct of optional functions, given to every component that
// has something to report, and events that are plain values naming the
// component that reported them.
//
// # What reports what
//
//   - A limiter's decisions: build it with New (floodgate.New observed)
//     or Wrap any floodgate.Limiter (a lease.Limiter) under a name. A
//     Tally counts them by Kind (take, take_up_to, settle, refund, check,
//     wait) and Outcome (allowed, denied, error), with their units and
//     the binding limit of a floodgate.Limits, for an adapter to read
//     when it is scraped; OnTimed receives the one decision in
//     Observer.LatencyEvery that is timed, with its latency; OnDecision
//     receives every decision as an event, for logs and traces.
//   - A store's health: redisstore.Options has Name and Observer;
//     OnStoreCall receives every round trip (node, latency, outcome, the
//     decisions it carried), OnFailures the decisions the failure policy
//     made instead of Redis, counted per node and interval, and OnBreaker
//     every change of a node's breaker. memstore makes no round trip and
//     never fails, and reports nothing.
//   - lease.Options, adaptive.LimiterOptions, shed.Options and
//     inflight.Options have Name and Observer too: lease round trips and
//     returns (the local hit ratio), adaptive limits and rejections,
//     sheds, in-flight acquisitions and releases.
//
// # Costs and guarantees
//
// A nil Observer, or a nil field, costs a comparison. Observers run on the
// goroutine of the event and never under a lock of floodgate's, so an
// observer may call back into the component (Stats, for example).
// Reporting allocates nothing: an event is passed by value and points at
// strings the component already holds. Counting a decision in a Tally
// costs an atomic addition on a counter the goroutine rarely shares, plus
// one time in LatencyEvery two monotonic clock readings and the OnTimed
// call: on the memstore benchmark of docs/observability.md, New with a
// Tally adds about 10 ns to a decision of 70 ns. An OnDecision event is
// dearer (about 25 ns there): it is a large value, passed on the stack.
// New is cheaper than Wrap of floodgate.New's Limiter, since it decides
// on the store's binding directly instead of adding a layer. Failures are counted and reported at most once per node every
// FailureInterval, so that an outage of many thousand decisions a second
// is a handful of events, and their counts add up to every failed
// decision.
//
// # Metrics
//
// floodgate itself depends on no metrics library. The modules
// github.com/floodgate-go/floodgate/prometheus and
// github.com/floodgate-go/floodgate/otel turn an Observer's events into
// Prometheus and OpenTelemetry metrics, labelled by component name and
// outcome, never by key; docs/observability.md lists them. Events carry
// the key (Decision.Key, Lease.Key, Acquire.Key) for logs: a key is a
// user, and a metric label per user is a series per user.
package observe
