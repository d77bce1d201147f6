package fgotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/floodgate-go/floodgate/observe"
)

// acquireKey is the label tuple of an acquisition.
type acquireKey struct {
	name    string
	outcome observe.Outcome
	errType string
}

// acquireAttrs are the attribute sets of an acquisition: by result for
// the counter, by name only for the active slots, which a release
// decrements without knowing the result.
type acquireAttrs struct {
	result, active *attrs
}

func buildAcquire(k acquireKey) *acquireAttrs {
	name := keyLimiter.String(k.name)
	kv := []attribute.KeyValue{name, keyResult.String(k.outcome.String())}
	if k.errType != "" {
		kv = append(kv, keyErrorType.String(k.errType))
	}
	return &acquireAttrs{result: newAttrs(kv...), active: newAttrs(name)}
}

// onAcquire is Observer.OnAcquire: it counts the acquisition by result
// and, when a slot was taken, adds it to the active ones.
func (m *Metrics) onAcquire(ctx context.Context, a observe.Acquire) {
	k := acquireKey{name: a.Name, outcome: a.Outcome}
	if a.Outcome == observe.Failed {
		k.errType = errorType(a.Err)
	}
	at, ok := m.acquireAttrs.load(k)
	if !ok {
		at = m.acquireAttrs.add(k, buildAcquire(k))
	}
	m.inflightRequests.Add(ctx, 1, at.result.add...)
	if a.Outcome == observe.Allowed {
		m.inflightActive.Add(ctx, 1, at.active.add...)
	}
}

// releaseKey is the label tuple of a release.
type releaseKey struct{ name, errType string }

// releaseAttrs are the attribute sets of a release: the hold's duration
// has the release's error, the active slots only the name.
type releaseAttrs struct {
	held, active *attrs
}

func buildRelease(k releaseKey) *releaseAttrs {
	name := keyLimiter.String(k.name)
	kv := []attribute.KeyValue{name}
	if k.errType != "" {
		kv = append(kv, keyErrorType.String(k.errType))
	}
	return &releaseAttrs{held: newAttrs(kv...), active: newAttrs(name)}
}

// onRelease is Observer.OnRelease: the slot leaves the active ones (a
// failed release too: this process no longer holds it, and the store
// frees it when its hold expires) and its hold's duration is recorded.
func (m *Metrics) onRelease(ctx context.Context, r observe.Release) {
	k := releaseKey{r.Name, errorType(r.Err)}
	a, ok := m.releaseAttrs.load(k)
	if !ok {
		a = m.releaseAttrs.add(k, buildRelease(k))
	}
	m.inflightActive.Add(ctx, -1, a.active.add...)
	m.inflightHeld.Record(ctx, r.Held.Seconds(), a.held.rec...)
}
