package fgotel

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"

	"github.com/floodgate-go/floodgate/observe"
)

// storeCallKey is the label tuple of a store's round trip.
type storeCallKey struct {
	name, node string
	outcome    observe.CallOutcome
}

// storeCallAttrs are the attribute set of a round trip and the node it
// went to.
type storeCallAttrs struct {
	*attrs
	node *node
}

// storeAttrs returns the attributes every store instrument has: the
// store's name, db.system.name and the node's address.
func storeAttrs(name, node string) []attribute.KeyValue {
	return append([]attribute.KeyValue{keyStore.String(name), keyDBSystem.String(dbSystemRedis)}, serverAttrs(node)...)
}

func (m *Metrics) buildStoreCall(k storeCallKey) *storeCallAttrs {
	kv := storeAttrs(k.name, k.node)
	if k.outcome != observe.CallOK {
		kv = append(kv, keyErrorType.String(k.outcome.String()))
	}
	return &storeCallAttrs{attrs: newAttrs(kv...), node: m.node(k.name, k.node)}
}

// nodeKey names one node of one store.
type nodeKey struct{ name, node string }

// node is one node's breaker as the gauge shows it.
type node struct {
	// seen is set once the gauge has a state for the node, so that a
	// round trip checks it with one atomic load.
	seen atomic.Bool
	// mu orders the gauge's recordings of the node: without it, a first
	// round trip recording "closed" could land after a concurrent change
	// to "open".
	mu    sync.Mutex
	state [3]*attrs    // by observe.BreakerState: the gauge's series
	moves [3][3]*attrs // by from, to: the transitions counter's series
}

var breakerStates = [3]observe.BreakerState{observe.BreakerClosed, observe.BreakerOpen, observe.BreakerHalfOpen}

// node returns the node of a store.
func (m *Metrics) node(name, addr string) *node {
	k := nodeKey{name, addr}
	n, ok := m.nodes.load(k)
	if !ok {
		n = m.nodes.add(k, buildNode(k))
	}
	return n
}

func buildNode(k nodeKey) *node {
	base := storeAttrs(k.name, k.node)
	n := &node{}
	for _, s := range breakerStates {
		n.state[s] = newAttrs(append(base[:len(base):len(base)], keyBreakerState.String(s.String()))...)
		for _, to := range breakerStates {
			n.moves[s][to] = newAttrs(append(base[:len(base):len(base)],
				keyBreakerFrom.String(s.String()), keyBreakerState.String(to.String()))...)
		}
	}
	return n
}

// setState records s as the node's state: 1 for s, 0 for the others.
// The caller holds n.mu.
func (m *Metrics) setState(ctx context.Context, n *node, s observe.BreakerState) {
	for _, o := range breakerStates {
		v := int64(0)
		if o == s {
			v = 1
		}
		m.breakerState.Record(ctx, v, n.state[o].rec...)
	}
	n.seen.Store(true)
}

// onStoreCall is Observer.OnStoreCall: it records the round trip's
// duration and counts the decisions it carried. The first round trip to a
// node shows its breaker closed, so that a healthy node has a state
// before its breaker ever changes.
func (m *Metrics) onStoreCall(ctx context.Context, c observe.StoreCall) {
	k := storeCallKey{name: c.Name, node: c.Node, outcome: c.Outcome}
	a, ok := m.storeCallAttrs.load(k)
	if !ok {
		a = m.storeCallAttrs.add(k, m.buildStoreCall(k))
	}
	m.storeDuration.Record(ctx, c.Latency.Seconds(), a.rec...)
	if c.Decisions > 0 {
		m.storeDecisions.Add(ctx, int64(c.Decisions), a.add...)
	}
	if n := a.node; !n.seen.Load() {
		n.mu.Lock()
		if !n.seen.Load() {
			m.setState(ctx, n, observe.BreakerClosed)
		}
		n.mu.Unlock()
	}
}

// onBreaker is Observer.OnBreaker: it counts the transition and moves the
// gauge to the new state.
func (m *Metrics) onBreaker(ctx context.Context, b observe.BreakerChange) {
	n := m.node(b.Name, b.Node)
	if int(b.From) < len(breakerStates) && int(b.To) < len(breakerStates) {
		m.breakerChanges.Add(ctx, 1, n.moves[b.From][b.To].add...)
		n.mu.Lock()
		m.setState(ctx, n, b.To)
		n.mu.Unlock()
	}
}

// storeFailureKey is the label tuple of a store's failed decisions.
type storeFailureKey struct{ name, node, policy string }

func buildStoreFailure(k storeFailureKey) *attrs {
	return newAttrs(append(storeAttrs(k.name, k.node), keyPolicy.String(k.policy))...)
}

// onFailures is Observer.OnFailures: it adds the interval's count of
// failed decisions. There is no error.type: the event carries the first
// error of the interval, which need not be every decision's.
func (m *Metrics) onFailures(ctx context.Context, f observe.Failures) {
	if f.Count <= 0 {
		return
	}
	k := storeFailureKey{f.Name, f.Node, f.Policy}
	a, ok := m.storeFailureAttrs.load(k)
	if !ok {
		a = m.storeFailureAttrs.add(k, buildStoreFailure(k))
	}
	m.storeFailures.Add(ctx, f.Count, a.add...)
}
