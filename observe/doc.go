// Package observe is how floodgate tells operators what it does: one
// Observer, a struct of optional functions, given to every component that
// has something to report, and events that are plain values naming the
// component that reported them.
//
// # What reports what
//
//   - The decisions of limiters: wrap their store with [Store], a
//     floodgate.Store around a floodgate.Store, and build the limiters on
//     it. Every step a limiter's store makes is reported under the
//     limiter's name (floodgate.Limiter.Name: floodgate.Options.Name, or
//     the name derived from the configuration). A [Tally] counts them by
//     [Action] (take, take_up_to, settle, refund, check) and [Outcome]
//     (allowed, denied, error), with their units and the binding limit of
//     a floodgate.Limits, for an adapter to read when it is scraped;
//     OnTimed receives the one decision in Observer.LatencyEvery that is
//     timed, with its latency; OnDecision receives every decision as a
//     [DecisionEvent], for logs and traces.
//   - A store's health: redisstore.Options has Name and Observer;
//     OnStoreCall receives every round trip (node, latency, outcome, the
//     decisions it carried), OnFailures the decisions the failure policy
//     made instead of Redis, counted per node and interval, and OnBreaker
//     every change of a node's breaker. memstore makes no round trip and
//     never fails, and reports nothing.
//   - lease.Options has Observer: the lease round trips and returns of
//     each limiter bound to a lease.Store (the local hit ratio), under the
//     limiter's name. adaptive.LimiterOptions, shed.Options and
//     inflight.Options have Name and Observer: adaptive limits and
//     rejections, sheds, in-flight acquisitions and releases.
//
// One Observer serves them all, since every event names its component:
//
//	obs := &observe.Observer{Tally: tally, OnStoreCall: ...}
//	redis, err := redisstore.New(client, &redisstore.Options{Name: "redis", Observer: obs})
//	store, err := observe.Store(redis, obs)
//	lim, err := floodgate.New(store, alg, &floodgate.Options{Name: "api"})
//
// # Where to wrap
//
// Store observes the steps of the store it wraps, so where it sits in a
// composition says what it counts. Over a lease.Store it counts every
// decision the callers were told, those served from local pools included:
//
//	ls, err := lease.New(redis, &lease.Options{Observer: obs})
//	store, err := observe.Store(ls, obs)
//	lim, err := floodgate.New(store, alg, &floodgate.Options{Name: "search"})
//
// Under it (lease.New(observe.Store(redis, obs), …)) it counts the
// lease's round trips instead: its refills as take_up_to, its forwarded
// takes, and the units it gives back as refund. A Wait is a take with a
// delay, and a Wait whose context ends before its delay passes is
// followed by the refund of its units. Allow and AllowN hand their
// arguments to the store, which refuses bad ones (an empty key, n below
// 1): those count as failed takes. Reserve, Wait and Apply refuse them
// before the store, and those are not counted.
//
// # Costs and guarantees
//
// A nil Observer, or a nil field, costs a comparison; Store returns the
// store it is given, unwrapped, when the Observer observes no decisions.
// Observers run on the goroutine of the event and never under a lock of
// floodgate's, so an observer may call back into the component (Stats,
// for example). Reporting allocates nothing: an event is passed by value
// and points at strings the component already holds. Counting a decision
// in a Tally costs an atomic addition on a counter the goroutine rarely
// shares, plus one time in LatencyEvery two monotonic clock readings and
// the OnTimed call: on the memstore benchmark of docs/observability.md,
// observing with a Tally adds about 18 ns of CPU to a decision of 60 ns,
// 9 of them the layer every Store wrapper adds (a call, and copies of the
// Decision). An OnDecision event is dearer (about 36 ns there): it is a
// large value, passed on the stack.
// Failures are counted and reported at most once per node every
// FailureInterval, so that an outage of many thousand decisions a second
// is a handful of events, and their counts add up to every failed
// decision.
//
// # Metrics
//
// floodgate itself depends on no metrics library. The modules
// github.com/floodgate-go/floodgate/fgprom and
// github.com/floodgate-go/floodgate/fgotel turn an Observer's events into
// Prometheus and OpenTelemetry metrics, labelled by component name and
// outcome, never by key; docs/observability.md lists them. Events carry
// the key (DecisionEvent.Key, Lease.Key, Acquire.Key) for logs: a key is
// a user, and a metric label per user is a series per user.
package observe
