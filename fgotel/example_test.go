package fgotel_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fgotel"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
)

// Example counts a limiter's decisions. A program sets its MeterProvider
// once with otel.SetMeterProvider and calls fgotel.New(nil); this one
// reads the counts back with a ManualReader, whose collection reads them
// from the Metrics' Tally.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	metrics, err := fgotel.New(&fgotel.Options{MeterProvider: provider})
	if err != nil {
		log.Fatal(err)
	}
	mem, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	// The store, observed: the decisions of the limiters on it are
	// counted under their names, here "api".
	store, err := observe.Store(mem, metrics.Observer())
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 2}, &floodgate.Options{Name: "api"})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	for range 3 {
		if _, err := limiter.Allow(ctx, "alice"); err != nil {
			log.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "floodgate.rate_limiting.requests" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				name, _ := p.Attributes.Value("floodgate.limiter.name")
				res, _ := p.Attributes.Value("floodgate.rate_limiting.result")
				lines = append(lines, fmt.Sprintf("%s %s %s: %d", m.Name, name.AsString(), res.AsString(), p.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// floodgate.rate_limiting.requests api allowed: 2
	// floodgate.rate_limiting.requests api denied: 1
}
