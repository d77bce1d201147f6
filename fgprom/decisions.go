package fgprom

import (
	"context"
	"strconv"

	"github.com/floodgate-go/floodgate/observe"
	"github.com/prometheus/client_golang/prometheus"
)

// The decision metrics are read, not pushed: the Observers of a Metrics
// share its observe.Tally, which counts each decision of an observed
// limiter with one atomic addition, and Collect turns the Tally's counts
// into constant metrics. A decision never reaches this package, except
// the one in LatencyEvery that is timed (onTimed).
//
// Which series exist, so that increase() and rate() see a first
// increment (a series born at its first increment hides it: its first
// sample is the baseline):
//   - a limiter's takes by outcome (op take × allowed, denied, error),
//     with their units, from the moment it is observed, at 0;
//   - for a floodgate.Limits, each limit's binding takes by allowed and
//     denied, from the moment it is observed, at 0: a composite has few
//     limits, and an alert on the first denial by one of them needs its
//     series before;
//   - every other op and outcome once it has counted a decision.

// bindingOutcomes are the outcomes a binding limit is counted by: a
// failed take has no binding limit.
var bindingOutcomes = [...]observe.Outcome{observe.Allowed, observe.Denied}

// collectDecisions sends decisions_total, decision_units_total and
// limit_binding_total of every limiter name m's Tally has counted.
func (m *Metrics) collectDecisions(ch chan<- prometheus.Metric) {
	for _, c := range m.tally.Read() {
		for a := range observe.NumActions {
			action := observe.Action(a)
			for o := observe.Allowed; o <= observe.Failed; o++ {
				n := c.Decisions[a][o]
				if n == 0 && action != observe.ActionTake {
					continue
				}
				op, outcome := action.String(), o.String()
				ch <- counterMetric(m.decisions, n, c.Name, op, outcome)
				ch <- counterMetric(m.decisionUnits, c.Units[a][o], c.Name, op, outcome)
			}
		}
		for i, b := range c.Binding {
			limit := strconv.Itoa(i)
			for _, o := range bindingOutcomes {
				ch <- counterMetric(m.binding, b[o], c.Name, limit, o.String())
			}
		}
	}
}

// counterMetric returns a constant counter of value v, or, for label
// values Prometheus refuses (a limiter name that is not UTF-8), an
// invalid metric, which fails the scrape with the reason instead of
// panicking in Collect.
func counterMetric(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	mt, err := prometheus.NewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return mt
}

// onTimed observes the latency of a timed decision: one in the
// Observer's LatencyEvery.
func (m *Metrics) onTimed(_ context.Context, d observe.DecisionEvent) {
	m.limiterChildren.get(d.Name).Observe(d.Latency.Seconds())
}
