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
	"github.com/floodgate-go/floodgate/fgotel"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// errStoreDown is the error of a step on the key "down" of a downStore.
var errStoreDown = fmt.Errorf("%w: test: the node is down", floodgate.ErrUnavailable)

// downStore is a Store whose steps on the key "down" fail with
// errStoreDown, as a remote store's do when its node is unreachable: the
// decisions the adapter counts with result error.
type downStore struct{ floodgate.Store }

func (s downStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return downBound{b}, nil
}

type downBound struct{ floodgate.Bound }

func (b downBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if key == "down" {
		return floodgate.Decision{}, errStoreDown
	}
	return b.Bound.Take(ctx, key, n)
}

func (b downBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if key == "down" {
		return floodgate.Result{}, errStoreDown
	}
	return b.Bound.Apply(ctx, key, req, each)
}

// newStore returns a memstore with the clock now (nil: the real one),
// under a downStore.
func newStore(t testing.TB, now func() time.Time) floodgate.Store {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return downStore{s}
}

// newLimiter returns an unobserved limiter of alg on a store of newStore
// with the clock now (nil: the real one).
func newLimiter(t testing.TB, alg floodgate.Algorithm, now func() time.Time) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(newStore(t, now), alg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// observed returns a limiter of alg named name on a store of newStore
// with the clock now (nil: the real one), wrapped by observe.Store with o.
func observed(t testing.TB, name string, alg floodgate.Algorithm, now func() time.Time, o *observe.Observer) *floodgate.Limiter {
	t.Helper()
	s, err := observe.Store(newStore(t, now), o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(s, alg, &floodgate.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return l
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
