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
	"github.com/floodgate-go/floodgate/fgotel"
	"github.com/floodgate-go/floodgate/observe"
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
	w := observed(t, "api", floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 2}, func() time.Time { return now }, m.Observer())
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	for range 3 {
		if _, err := w.AllowN(ctx, "alice", 1); err != nil {
			t.Fatal(err)
		}
	}
	// Refused by the store: an event. Refused by Reserve before the
	// store: none.
	if _, err := w.AllowN(ctx, "", 1); err == nil {
		t.Fatal("AllowN with an empty key: no error")
	}
	if _, err := w.Reserve(ctx, "", 1, time.Second); err == nil {
		t.Fatal("Reserve with an empty key: no error")
	}
	if _, err := w.AllowN(ctx, "down", 1); err == nil {
		t.Fatal("AllowN on a store that is down: no error")
	}
	// A Wait's event is its take's, with the Decision.
	if err := w.Wait(ctx, "bob", 1); err != nil {
		t.Fatal(err)
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
		{
			"floodgate.limiter.name":         attribute.StringValue("api"),
			"floodgate.rate_limiting.result": attribute.StringValue("error"),
			"floodgate.rate_limiting.op":     attribute.StringValue("take"),
			"floodgate.rate_limiting.units":  attribute.Int64Value(1),
			"error.type":                     attribute.StringValue("unavailable"),
		},
		{
			"floodgate.limiter.name":            attribute.StringValue("api"),
			"floodgate.rate_limiting.result":    attribute.StringValue("allowed"),
			"floodgate.rate_limiting.op":        attribute.StringValue("take"),
			"floodgate.rate_limiting.units":     attribute.Int64Value(1),
			"floodgate.rate_limiting.limit":     attribute.Int64Value(2),
			"floodgate.rate_limiting.remaining": attribute.Int64Value(1),
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
// reservation's decisions add, the binding limit and the delay, and those
// of a failed check: the error type, no limit, no remaining.
func TestSpanEventsComposite(t *testing.T) {
	rec, tp := newTracer(t, true)
	m, _ := newMetrics(t, nil)
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	m.Observer().OnDecision(ctx, observe.DecisionEvent{Name: "plan", N: 1, Limits: 2, Outcome: observe.Allowed,
		Decision: floodgate.Decision{Allowed: true, Limit: 5, Remaining: 4, Delay: 1500 * time.Millisecond, Binding: 1}})
	m.Observer().OnDecision(ctx, observe.DecisionEvent{Name: "plan", N: 1, Limits: 2, Check: true, Outcome: observe.Failed, Err: errStoreDown})
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
	// A failure reports no Decision: no limit, no remaining, no binding.
	var check bool
	var errType string
	for _, kv := range events[1].Attributes {
		switch kv.Key {
		case "floodgate.rate_limiting.limit", "floodgate.rate_limiting.remaining", "floodgate.rate_limiting.binding":
			t.Errorf("failed event has %s", kv.Key)
		case "floodgate.rate_limiting.check":
			check = kv.Value.AsBool()
		case "error.type":
			errType = kv.Value.AsString()
		}
	}
	if !check || errType != "unavailable" {
		t.Errorf("failed check's event attributes %v: want check true and error.type unavailable", events[1].Attributes)
	}
}

// TestNoSpanEvents checks that with NoSpanEvents the Observer has no
// OnDecision, a recording span gets no event, and the decisions are still
// counted.
func TestNoSpanEvents(t *testing.T) {
	rec, tp := newTracer(t, true)
	m, r := newMetrics(t, &fgotel.Options{NoSpanEvents: true})
	o := m.Observer()
	if o.OnDecision != nil {
		t.Fatal("Observer().OnDecision is set with NoSpanEvents")
	}
	l := observed(t, "api", floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 1}, nil, o)
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	for range 2 {
		if _, err := l.Allow(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	span.End()
	if n := len(rec.Ended()[0].Events()); n != 0 {
		t.Errorf("%d span events with NoSpanEvents, want 0", n)
	}
	equal(t, "requests", values(collect(t, r)["floodgate.rate_limiting.requests"]), map[string]int64{
		series("api", "allowed", "take"): 1,
		series("api", "denied", "take"):  1,
	})
}

// TestDecisionAllocatesNothing checks that a decision of a memstore
// limiter observed with this package's Observer allocates nothing, on the
// SDK with a ManualReader: with NoSpanEvents, and with span events but no
// recording span (none, or one sampled out); for decisions admitted,
// denied, admitted to wait and failed, timed or not. A recording span's event
// does allocate, in the trace SDK (README.md).
func TestDecisionAllocatesNothing(t *testing.T) {
	_, tp := newTracer(t, false)
	unsampled, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	if span.IsRecording() {
		t.Fatal("a span of NeverSample records")
	}
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name         string
		noSpanEvents bool
		ctx          context.Context
	}{
		{"NoSpanEvents", true, context.Background()},
		{"span events, no span", false, context.Background()},
		{"span events, unsampled span", false, unsampled},
	} {
		for _, every := range []int{0, 1} {
			m, _ := newMetrics(t, &fgotel.Options{NoSpanEvents: tc.noSpanEvents})
			o := m.Observer()
			o.LatencyEvery = every
			ctx := tc.ctx
			// open never runs out; full, on a clock that stands still, is
			// out of units once drained, and each reservation waits a
			// second longer than the one before.
			open := observed(t, "open", floodgate.TokenBucket{Rate: 1, Per: time.Nanosecond, Burst: 1 << 40}, nil, o)
			full := observed(t, "full", floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, func() time.Time { return t0 }, o)
			if _, err := full.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			for _, d := range []struct {
				name    string
				decide  func() (floodgate.Decision, error)
				allowed bool
			}{
				{"admitted", func() (floodgate.Decision, error) { return open.Allow(ctx, "k") }, true},
				{"admitted n", func() (floodgate.Decision, error) { return open.AllowN(ctx, "k", 3) }, true},
				{"denied", func() (floodgate.Decision, error) { return full.Allow(ctx, "k") }, false},
				{"reserved", func() (floodgate.Decision, error) { return full.Reserve(ctx, "k", 1, 24*time.Hour) }, true},
				{"failed", func() (floodgate.Decision, error) { return open.Allow(ctx, "down") }, false},
			} {
				// The first decision builds the attribute sets.
				if got, err := d.decide(); (err != nil) != (d.name == "failed") || got.Allowed != d.allowed {
					t.Fatalf("%s: Allowed = %v, %v; want %v", d.name, got.Allowed, err, d.allowed)
				}
				if a := testing.AllocsPerRun(200, func() { _, _ = d.decide() }); a != 0 {
					t.Errorf("%s, LatencyEvery %d: a decision %s allocates %v times, want 0", tc.name, every, d.name, a)
				}
			}
		}
	}
	m, err := fgotel.New(&fgotel.Options{MeterProvider: noop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
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
