package fgotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/floodgate-go/floodgate/observe"
)

// onLimitChange is Observer.OnLimitChange: the gauge takes the new limit.
func (m *Metrics) onLimitChange(ctx context.Context, c observe.LimitChange) {
	a, ok := m.limitAttrs.load(c.Name)
	if !ok {
		a = m.limitAttrs.add(c.Name, newAttrs(keyLimiter.String(c.Name)))
	}
	m.adaptiveLimit.Record(ctx, int64(c.New), a.rec...)
}

// classKey is the label tuple of a rejection or a shed: the component's
// name and the request's class.
type classKey struct{ name, class string }

// buildClass returns the attributes of a component named by key and a
// class, which is left out when it is "".
func buildClass(key attribute.Key, k classKey) *attrs { return newAttrs(classKV(key, k)...) }

// classKV returns the attributes of buildClass.
func classKV(key attribute.Key, k classKey) []attribute.KeyValue {
	kv := []attribute.KeyValue{key.String(k.name)}
	if k.class != "" {
		kv = append(kv, keyClass.String(k.class))
	}
	return kv
}

// rejectKey is the label tuple of a rejection: the limiter's name, the
// request's class and why it was rejected.
type rejectKey struct {
	classKey
	reason string
}

// onReject is Observer.OnReject: it counts the rejected request by its
// partition and reason.
func (m *Metrics) onReject(ctx context.Context, r observe.Reject) {
	k := rejectKey{classKey{r.Name, r.Partition}, r.Reason}
	a, ok := m.rejectAttrs.load(k)
	if !ok {
		kv := classKV(keyLimiter, k.classKey)
		if k.reason != "" {
			kv = append(kv, keyRejectReason.String(k.reason))
		}
		a = m.rejectAttrs.add(k, newAttrs(kv...))
	}
	m.adaptiveRejected.Add(ctx, 1, a.add...)
}

// onShed is Observer.OnShed: it counts the shed request by its class.
func (m *Metrics) onShed(ctx context.Context, s observe.Shed) {
	k := classKey{s.Name, s.Class}
	a, ok := m.shedAttrs.load(k)
	if !ok {
		a = m.shedAttrs.add(k, buildClass(keyShedder, k))
	}
	m.shed.Add(ctx, 1, a.add...)
}
