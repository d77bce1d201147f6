package fgotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/floodgate-go/floodgate/observe"
)

// leaseKey is the label tuple of a lease round trip.
type leaseKey struct{ name, errType string }

// leaseAttrs are the attribute sets of a lease round trip: its duration
// has the error, the units and decisions only the limiter's name.
type leaseAttrs struct {
	refill, units, local, waited *attrs
}

func buildLease(k leaseKey) *leaseAttrs {
	name := keyLimiter.String(k.name)
	refill := []attribute.KeyValue{name}
	if k.errType != "" {
		refill = append(refill, keyErrorType.String(k.errType))
	}
	return &leaseAttrs{
		refill: newAttrs(refill...),
		units:  newAttrs(name),
		local:  newAttrs(name, keyLeaseSource.String("local")),
		waited: newAttrs(name, keyLeaseSource.String("waited")),
	}
}

// onLease is Observer.OnLease: it records the refill's duration, the
// units asked for and granted, and the key's decisions since its previous
// refill, served locally or after waiting.
func (m *Metrics) onLease(ctx context.Context, l observe.Lease) {
	k := leaseKey{l.Name, errorType(l.Err)}
	a, ok := m.leaseAttrs.load(k)
	if !ok {
		a = m.leaseAttrs.add(k, buildLease(k))
	}
	m.leaseDuration.Record(ctx, l.Latency.Seconds(), a.refill.rec...)
	if l.Units > 0 {
		m.leaseRequested.Add(ctx, l.Units, a.units.add...)
	}
	if l.Granted > 0 {
		m.leaseGranted.Add(ctx, l.Granted, a.units.add...)
	}
	if l.Local > 0 {
		m.leaseDecisions.Add(ctx, l.Local, a.local.add...)
	}
	if l.Waited > 0 {
		m.leaseDecisions.Add(ctx, l.Waited, a.waited.add...)
	}
}

// returnKey is the label tuple of a return of unused units.
type returnKey struct{ name, reason, errType string }

func buildReturn(k returnKey) *attrs {
	kv := []attribute.KeyValue{keyLimiter.String(k.name), keyReturnReason.String(k.reason)}
	if k.errType != "" {
		kv = append(kv, keyErrorType.String(k.errType))
	}
	return newAttrs(kv...)
}

// onReturn is Observer.OnReturn: it counts the units given up and those
// the remote took back; the difference is units neither used nor
// refunded.
func (m *Metrics) onReturn(ctx context.Context, r observe.Return) {
	k := returnKey{r.Name, r.Reason, errorType(r.Err)}
	a, ok := m.returnAttrs.load(k)
	if !ok {
		a = m.returnAttrs.add(k, buildReturn(k))
	}
	if r.Units > 0 {
		m.leaseReleased.Add(ctx, r.Units, a.add...)
	}
	if r.Granted > 0 {
		m.leaseRefunded.Add(ctx, r.Granted, a.add...)
	}
}
