package fgotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	fgotel "github.com/floodgate-go/floodgate/otel"
)

// newTracer returns a tracer whose ended spans rec records, sampling
// every span, or none with sample false.
func newTracer(t *testing.T, sample bool) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	sampler := sdktrace.AlwaysSample()
	if !sample {
		sampler = sdktrace.NeverSample()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

func TestSpanEvents(t *testing.T) {
	rec, tp := newTracer(t, true)
	m, _ := newMetrics(t, nil)
	now := time.Unix(1_700_000_000, 0)
	l := newLimiter(t, floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 2}, func() time.Time { return now })
	w, err := observe.Wrap(l, "api", m.Observer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	for range 3 {
		if _, err := w.AllowN(ctx, "alice", 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.AllowN(ctx, "", 1); err == nil {
		t.Fatal("AllowN with an empty key: no error")
	}
	span.End()

	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	events := ended[0].Events()
	want := []map[attribute.Key]attribute.Value{
		{
			"floodgate.limiter.name":            attribute.StringValue("api"),
			"floodgate.rate_limiting.result":    attribute.StringValue("allowed"),
			"floodgate.rate_limiting.op":        attribute.StringValue("take"),
			"floodgate.rate_limiting.units":     attribute.Int64Value(1),
			"floodgate.rate_limiting.limit":     attribute.Int64Value(2),
			"floodgate.rate_limiting.remaining": attribute.Int64Value(1),
		},
		{
			"floodgate.limiter.name":            attribute.StringValue("api"),
			"floodgate.rate_limiting.result":    attribute.StringValue("allowed"),
			"floodgate.rate_limiting.op":        attribute.StringValue("take"),
			"floodgate.rate_limiting.units":     attribute.Int64Value(1),
			"floodgate.rate_limiting.limit":     attribute.Int64Value(2),
			"floodgate.rate_limiting.remaining": attribute.Int64Value(0),
		},
		{
			"floodgate.limiter.name":              attribute.StringValue("api"),
			"floodgate.rate_limiting.result":      attribute.StringValue("denied"),
			"floodgate.rate_limiting.op":          attribute.StringValue("take"),
			"floodgate.rate_limiting.units":       attribute.Int64Value(1),
			"floodgate.rate_limiting.limit":       attribute.Int64Value(2),
			"floodgate.rate_limiting.remaining":   attribute.Int64Value(0),
			"floodgate.rate_limiting.retry_after": attribute.Float64Value(60),
		},
		{
			"floodgate.limiter.name":         attribute.StringValue("api"),
			"floodgate.rate_limiting.result": attribute.StringValue("error"),
			"floodgate.rate_limiting.op":     attribute.StringValue("take"),
			"floodgate.rate_limiting.units":  attribute.Int64Value(1),
			"error.type":                     attribute.StringValue("empty_key"),
		},
	}
	if len(events) != len(want) {
		t.Fatalf("%d span events, want %d: %+v", len(events), len(want), events)
	}
	for i, e := range events {
		if e.Name != "floodgate.decision" {
			t.Errorf("event %d: name %q, want floodgate.decision", i, e.Name)
		}
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range e.Attributes {
			got[kv.Key] = kv.Value
		}
		if len(got) != len(want[i]) {
			t.Errorf("event %d: attributes %v, want %v", i, got, want[i])
			continue
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("event %d: %s = %v, want %v", i, k, got[k].String(), v.String())
			}
		}
	}
}

// TestSpanEventsComposite checks the attributes a composite's and a
// reservation's decisions add: the binding limit and the delay.
func TestSpanEventsComposite(t *testing.T) {
	rec, tp := newTracer(t, true)
	m, _ := newMetrics(t, nil)
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	m.Observer().OnDecision(ctx, observe.Decision{Name: "plan", N: 1, Limits: 2, Outcome: observe.Allowed,
		Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4, Delay: 1500 * time.Millisecond, Binding: 1}})
	m.Observer().OnDecision(ctx, observe.Decision{Name: "plan", N: 1, Wait: true, Check: true, Outcome: observe.Allowed,
		Decision: floodgate.Decision{Allowed: true}})
	span.End()
	events := rec.Ended()[0].Events()
	if len(events) != 2 {
		t.Fatalf("%d events, want 2", len(events))
	}
	got := events[0].Attributes
	wantExtra := map[attribute.Key]attribute.Value{
		"floodgate.rate_limiting.binding": attribute.IntValue(1),
		"floodgate.rate_limiting.delay":   attribute.Float64Value(1.5),
	}
	for k, v := range wantExtra {
		found := false
		for _, kv := range got {
			if kv.Key == k {
				found = true
				if kv.Value != v {
					t.Errorf("%s = %v, want %v", k, kv.Value.String(), v.String())
				}
			}
		}
		if !found {
			t.Errorf("no attribute %s in %v", k, got)
		}
	}
	// A Wait reports no Decision: no limit, no remaining.
	for _, kv := range events[1].Attributes {
		if kv.Key == "floodgate.rate_limiting.limit" || kv.Key == "floodgate.rate_limiting.remaining" {
			t.Errorf("Wait event has %s", kv.Key)
		}
	}
	var wait, check bool
	for _, kv := range events[1].Attributes {
		wait = wait || kv.Key == "floodgate.rate_limiting.wait" && kv.Value.AsBool()
		check = check || kv.Key == "floodgate.rate_limiting.check" && kv.Value.AsBool()
	}
	if !wait || !check {
		t.Errorf("Wait event attributes %v: want wait and check true", events[1].Attributes)
	}
}

func TestNoSpanEvents(t *testing.T) {
	rec, tp := newTracer(t, true)
	m, _ := newMetrics(t, &fgotel.Options{NoSpanEvents: true})
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	m.Observer().OnDecision(ctx, observe.Decision{Name: "api", N: 1, Outcome: observe.Allowed})
	span.End()
	if n := len(rec.Ended()[0].Events()); n != 0 {
		t.Errorf("%d span events with NoSpanEvents, want 0", n)
	}
}

// TestDecisionAllocatesNothing checks this package's share of a
// decision: with a no-op MeterProvider the SDK does nothing, so every
// allocation left would be ours. A span that is not recording (sampled
// out) and no span at all add nothing either.
func TestDecisionAllocatesNothing(t *testing.T) {
	_, tp := newTracer(t, false)
	m, err := fgotel.New(&fgotel.Options{MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	on := m.Observer().OnDecision
	unsampled, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("a span of NeverSample records")
	}
	for name, ctx := range map[string]context.Context{"no span": context.Background(), "unsampled span": unsampled} {
		for _, d := range []observe.Decision{
			{Name: "api", Key: "k", N: 1, Outcome: observe.Allowed, Decision: floodgate.Decision{Allowed: true, Limit: 2, Remaining: 1}},
			{Name: "api", Key: "k", N: 1, Outcome: observe.Denied, Latency: time.Microsecond, Decision: floodgate.Decision{Limit: 2, RetryAfter: time.Second}},
			{Name: "api", Key: "k", N: 1, Outcome: observe.Allowed, Decision: floodgate.Decision{Allowed: true, Delay: time.Second}},
		} {
			on(ctx, d) // build the attribute set
			if a := testing.AllocsPerRun(100, func() { on(ctx, d) }); a != 0 {
				t.Errorf("%s: OnDecision(%v) allocates %v times, want 0", name, d.Outcome, a)
			}
		}
	}
	o := m.Observer()
	ctx := context.Background()
	for name, f := range map[string]func(){
		"OnStoreCall": func() {
			o.OnStoreCall(ctx, observe.StoreCall{Name: "r", Node: "127.0.0.1:6379", Decisions: 1, Outcome: observe.CallOK, Latency: time.Millisecond})
		},
		"OnLease":   func() { o.OnLease(ctx, observe.Lease{Name: "l", Units: 10, Granted: 10, Local: 5, Waited: 1}) },
		"OnAcquire": func() { o.OnAcquire(ctx, observe.Acquire{Name: "i", Outcome: observe.Allowed}) },
		"OnRelease": func() { o.OnRelease(ctx, observe.Release{Name: "i", Held: time.Millisecond}) },
	} {
		f()
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %v times, want 0", name, a)
		}
	}
}
