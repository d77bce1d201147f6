// Package fgprom turns what floodgate's observe.Observer reports (the
// decisions its Tally counts, and events) into Prometheus metrics, with
// github.com/prometheus/client_golang.
//
// It lives in a module of its own,
// github.com/floodgate-go/floodgate/fgprom, so that floodgate itself
// depends on no metrics library. Its name is fgprom, not prometheus, so
// that it does not shadow client_golang's package in the files that use
// both (the ones that register it do), as the OpenTelemetry adapter's is
// fgotel:
//
//	import (
//		"github.com/prometheus/client_golang/prometheus"
//		"github.com/floodgate-go/floodgate/fgprom"
//	)
//
//	m, err := fgprom.New(nil)
//	if err != nil { ... }
//	prometheus.MustRegister(m)
//	obs := m.Observer()
//	redis, err := redisstore.New(client, &redisstore.Options{Name: "redis", Observer: obs})
//	store, err := observe.Store(redis, obs)
//	limiter, err := floodgate.New(store, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200},
//		&floodgate.Options{Name: "api"})
//
// The limiter label of a decision is the limiter's name
// (floodgate.Limiter.Name): Options.Name, or, without one, the name
// derived from its configuration, such as "tb:100/1s:b200". Name the
// limiters whose metrics are read: a derived name changes with the
// configuration.
//
// # Metrics
//
// A Metrics is a prometheus.Collector of the metrics below (with the
// default Namespace, "floodgate"); docs/observability.md has the same
// table with each metric's meaning. Every label is low-cardinality: the
// name given to a component, an outcome, a node's address, a partition or
// class from the configuration. No metric is labelled by key: a key is a
// user, and a label per user is a series per user.
//
//	floodgate_decisions_total                    counter    limiter, op, outcome
//	floodgate_decision_units_total               counter    limiter, op, outcome
//	floodgate_decision_duration_seconds          histogram  limiter
//	floodgate_limit_binding_total                counter    limiter, limit, outcome
//	floodgate_store_calls_total                  counter    store, node, outcome
//	floodgate_store_call_duration_seconds        histogram  store, node
//	floodgate_store_call_decisions               histogram  store, node
//	floodgate_store_failures_total               counter    store, node, policy
//	floodgate_breaker_state                      gauge      store, node
//	floodgate_breaker_transitions_total          counter    store, node, to
//	floodgate_lease_round_trips_total            counter    limiter, outcome
//	floodgate_lease_round_trip_duration_seconds  histogram  limiter
//	floodgate_lease_units_total                  counter    limiter, kind
//	floodgate_lease_returns_total                counter    limiter, reason
//	floodgate_lease_decisions_total              counter    limiter, source
//	floodgate_adaptive_limit                     gauge      limiter
//	floodgate_adaptive_rejections_total          counter    limiter, partition, reason
//	floodgate_shed_total                         counter    shedder, class
//	floodgate_inflight_acquires_total            counter    limiter, outcome
//	floodgate_inflight_requests                  gauge      limiter
//	floodgate_inflight_hold_seconds              histogram  limiter
//
// The op label of a decision is take (Allow, AllowN, Reserve, Wait, Apply
// of OpTake), take_up_to (OpTakeUpTo: a lease refill), settle (OpSettle
// charging units), refund (OpSettle giving units back: a lease's return,
// a Wait cancelled during its delay), or check (a check-only step of any
// Op): observe.Action's String; its outcome is allowed, denied or error
// (the store failed, or refused the arguments of an Allow or AllowN;
// Reserve, Wait and Apply refuse bad arguments before the store, and
// those are not counted). The request rate of a limiter is the rate of
// decisions_total with op take, and its 429 rate that of those denied.
//
// # Decisions
//
// The Observers of a Metrics share its observe.Tally, which counts every
// decision of the limiters on a store wrapped with them (observe.Store)
// by name, op and outcome, with their units and binding limits; Collect
// reads it into decisions_total, decision_units_total and
// limit_binding_total. A limiter's takes by outcome (op take with
// allowed, denied and error, and their units) exist at 0 from the moment
// it is observed, and so do, for a floodgate.Limits, the binding takes of
// each of its limits with allowed and denied, so that increase() and
// rate() see the first denial (a series born at its first increment
// hides it: its first sample is the baseline). The series of the other
// ops and outcomes appear with their first decision. Limiters observed
// under one name are counted as one: wrap a composition of stores at one
// depth per Metrics (observe.Store over a lease.Store counts the
// decisions callers were told, under it the lease's refills and
// forwarded takes, both under the limiter's name), or the takes a lease
// forwards are counted twice.
//
// # Latency
//
// observe.Store times one decision in observe.Observer.LatencyEvery (64
// by default; a Wait's step is its reservation, never its sleep) and
// hands only that one to the Observer's OnTimed, which feeds
// decision_duration_seconds: the histogram counts a sample of the
// decisions, so its quantiles are the decisions' but its _count is not
// their number. Use decisions_total for rates. A store's round trips
// are all timed. The default buckets resolve 10µs to 100ms
// (Options.Buckets).
//
// # Cost
//
// A decision costs the Tally's count, one atomic addition on a counter
// its goroutine rarely shares, and one time in LatencyEvery two clock
// readings and the OnTimed call (about 40 ns: a lookup of the limiter's
// histogram and an observation). On BenchmarkObserverDecision (memstore
// token bucket, one key, serial, a 2-vCPU VM, no other job), a decision
// of a limiter observed with a Metrics' Observer by observe.New, which
// observe.Store replaced, took 80.5 ns against 70.3 ns unobserved
// (medians of 8 runs); observe.Store adds about 10 ns to that, the layer
// of a Store around the store (docs/observability.md). It allocates
// nothing (TestAllocations).
//
// The counts are read when Prometheus scrapes: Collect reads every stripe
// of every observed limiter (the Tally keeps four per processor, rounded
// up to a power of two and at most 64, of 60 counters each, plus 4 per
// limit of a composite), which is O(limiters × stripes × 60) atomic
// loads, and makes at least 6 constant metrics per limiter. On the same
// machine (2 processors, 8 stripes), BenchmarkMetricsCollect took about
// 7 µs and 90 allocations per limiter, most of them client_golang's
// label pairs rather than the loads (the Tally's read is about 1 µs of
// it): 1 ms for 100 limiters, 2 ms with the registry's Gather.
//
// The other events find their series in a copy-on-write map by the
// component's name, then in an array by the event's outcome: after a
// component's first event, an event is a lookup by a string and an atomic
// addition or two, and allocates nothing (BenchmarkObserverStoreCall,
// TestAllocations). The series a component always has (a node's round
// trips by outcome and failures by policy, an in-flight limiter's
// acquisitions by outcome) are made at 0 with its first event, so that
// increase() and rate() see the first outage.
package fgprom
