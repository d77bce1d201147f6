package fgotel_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
	fgotel "github.com/floodgate-go/floodgate/otel"
)

// newStore returns a memstore with the clock now (nil: the real one).
func newStore(t testing.TB, now func() time.Time) *memstore.Store {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newLimiter returns floodgate.New's limiter of alg on a memstore with
// the clock now (nil: the real one).
func newLimiter(t testing.TB, alg floodgate.Algorithm, now func() time.Time) floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(newStore(t, now), alg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// constructors are the two ways to observe a limiter's decisions: New
// on a store, and Wrap of floodgate.New's limiter.
var constructors = []struct {
	name string
	new  func(t testing.TB, name string, alg floodgate.Algorithm, now func() time.Time, o *observe.Observer) floodgate.Limiter
}{
	{"New", func(t testing.TB, name string, alg floodgate.Algorithm, now func() time.Time, o *observe.Observer) floodgate.Limiter {
		t.Helper()
		l, err := observe.New(newStore(t, now), alg, name, o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}},
	{"Wrap", func(t testing.TB, name string, alg floodgate.Algorithm, now func() time.Time, o *observe.Observer) floodgate.Limiter {
		t.Helper()
		l, err := observe.Wrap(newLimiter(t, alg, now), name, o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}},
}

// observed returns a limiter of alg on a memstore with the clock now
// (nil: the real one), observed by observe.New under name.
func observed(t testing.TB, name string, alg floodgate.Algorithm, now func() time.Time, o *observe.Observer) floodgate.Limiter {
	t.Helper()
	return constructors[0].new(t, name, alg, now, o)
}

// newMetrics returns a Metrics on a MeterProvider of its own read by a
// ManualReader.
func newMetrics(t testing.TB, opts *fgotel.Options) (*fgotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var o fgotel.Options
	if opts != nil {
		o = *opts
	}
	o.MeterProvider = mp
	m, err := fgotel.New(&o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, r
}

// instrument is what a test checks of one collected instrument: its kind,
// unit, and its points by attribute set.
type instrument struct {
	kind   string // counter, updowncounter, gauge or histogram
	unit   string
	points map[string]point
}

// point is one data point: value for sums and gauges; count, sum and
// bounds for histograms.
type point struct {
	value  int64
	count  uint64
	sum    float64
	bounds []float64
}

// collect reads every instrument of r, failing on a kind of data this
// package does not make, a delta temporality or a non-cumulative sum. It
// never stops the test, so that any goroutine may call it; it returns no
// instrument when the collection fails.
func collect(t testing.TB, r *sdkmetric.ManualReader) map[string]instrument {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Errorf("Collect: %v", err)
		return nil
	}
	out := map[string]instrument{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fgotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, fgotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			in := instrument{unit: m.Unit, points: map[string]point{}}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				in.kind = "updowncounter"
				if d.IsMonotonic {
					in.kind = "counter"
				}
				if d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: temporality %v, want cumulative", m.Name, d.Temporality)
				}
				for _, p := range d.DataPoints {
					in.points[key(p.Attributes)] = point{value: p.Value}
				}
			case metricdata.Gauge[int64]:
				in.kind = "gauge"
				for _, p := range d.DataPoints {
					in.points[key(p.Attributes)] = point{value: p.Value}
				}
			case metricdata.Histogram[float64]:
				in.kind = "histogram"
				for _, p := range d.DataPoints {
					in.points[key(p.Attributes)] = point{count: p.Count, sum: p.Sum, bounds: p.Bounds}
				}
			default:
				t.Errorf("%s: data %T, want an int64 sum or gauge or a float64 histogram", m.Name, m.Data)
			}
			out[m.Name] = in
		}
	}
	return out
}

// key returns the attributes of a point as "k=v,k=v", sorted by key.
func key(s attribute.Set) string {
	return s.Encoded(attribute.DefaultEncoder())
}

// values returns the values of an instrument's points by attribute set,
// for sums and gauges.
func values(in instrument) map[string]int64 {
	v := map[string]int64{}
	for k, p := range in.points {
		v[k] = p.value
	}
	return v
}

// counts returns the counts of a histogram's points by attribute set.
func counts(in instrument) map[string]uint64 {
	c := map[string]uint64{}
	for k, p := range in.points {
		c[k] = p.count
	}
	return c
}

// mustGet returns the instrument name of got, failing the test now if it
// is missing or not of kind and unit.
func mustGet(t testing.TB, got map[string]instrument, name, kind, unit string) instrument {
	t.Helper()
	in, ok := got[name]
	if !ok {
		t.Fatalf("no instrument %s; have %v", name, names(got))
	}
	if in.kind != kind || in.unit != unit {
		t.Errorf("%s: %s in %q, want %s in %q", name, in.kind, in.unit, kind, unit)
	}
	return in
}

func names(got map[string]instrument) []string {
	var n []string
	for k := range got {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// equal reports the differences between two maps of points as errors.
func equal[V comparable](t testing.TB, what string, got, want map[string]V) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: no point {%s}, want %v", what, k, w)
		} else if g != w {
			t.Errorf("%s{%s} = %v, want %v", what, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected point {%s} = %v", what, k, g)
		}
	}
}

// attrs joins "k=v" pairs as key does, for the wanted points.
func attrs(kv ...string) string {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("attrs: odd number of strings %q", kv))
	}
	var kvs []attribute.KeyValue
	for i := 0; i < len(kv); i += 2 {
		kvs = append(kvs, attribute.String(kv[i], kv[i+1]))
	}
	return key(attribute.NewSet(kvs...))
}
