// Package fgprom turns the events of floodgate's observe.Observer into
// Prometheus metrics, with github.com/prometheus/client_golang.
//
// It lives in a module of its own,
// github.com/floodgate-go/floodgate/prometheus, so that floodgate itself
// depends on no metrics library. Its name is fgprom, not prometheus, so
// that it does not shadow client_golang's package in the files that use
// both (the ones that register it do), as the OpenTelemetry adapter's is
// fgotel; import it as
//
//	import (
//		"github.com/prometheus/client_golang/prometheus"
//		fgprom "github.com/floodgate-go/floodgate/prometheus"
//	)
//
//	m, err := fgprom.New(nil)
//	if err != nil { ... }
//	prometheus.MustRegister(m)
//	obs := m.Observer()
//	limiter, err := observe.Wrap(base, "api", obs)
//	store, err := redisstore.New(client, &redisstore.Options{Name: "redis", Observer: obs})
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
//	floodgate_adaptive_rejections_total          counter    limiter, partition
//	floodgate_shed_total                         counter    shedder, class
//	floodgate_inflight_acquires_total            counter    limiter, outcome
//	floodgate_inflight_requests                  gauge      limiter
//	floodgate_inflight_hold_seconds              histogram  limiter
//
// The op label of a decision is take (Allow, AllowN, Reserve, Apply of
// OpTake), take_up_to (OpTakeUpTo: a lease refill), settle (OpSettle
// charging units), refund (OpSettle giving units back), check (a
// check-only step of any Op) or wait (Wait); its outcome is allowed,
// denied or error. The request rate of a limiter is the rate of
// decisions_total with op take or wait, and its 429 rate that of those
// denied.
//
// # Latency
//
// observe.Wrap times one decision in observe.Observer.LatencyEvery (64 by
// default), so decision_duration_seconds counts a sample of the
// decisions: its quantiles are the decisions', its _count is not their
// number. Use decisions_total for rates. A store's round trips are all
// timed. The default buckets resolve 10µs to 100ms (Options.Buckets).
//
// # Cost
//
// Each kind of component finds its series in a copy-on-write map by its
// name, then in an array by the event's outcome or op: after a
// component's first event, an event is a lookup by a string and an atomic
// addition or two, and allocates nothing (BenchmarkObserverDecision,
// TestAllocations). The series a component always has (a limiter's takes
// by outcome, a node's round trips by outcome and failures by policy) are
// made at 0 with its first event, so that increase() and rate() see the
// first denial and the first outage.
package fgprom
