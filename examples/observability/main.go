// Command observability serves a rate-limited API with Prometheus metrics:
// floodgate's net/http middleware (package httplimit) over limiters on a
// store wrapped by observe.Store (one directly on the store, one on a
// lease pool over it), whose decisions, and the Redis store's round
// trips, failures and breaker changes, feed the Prometheus adapter
// (github.com/floodgate-go/floodgate/fgprom) behind /metrics.
//
//   - /api/hello: 20 requests at once, then 10 a second, per API key
//     (X-API-Key) or, without one, per client address; a denial is a 429;
//   - /api/search: 200 at once, then 100 a second, per key, served from a
//     lease pool (package lease) that takes units from the store in
//     batches;
//   - /api/export: a slow endpoint (?ms=, 20 by default) that holds a
//     concurrency slot: at most 2 exports per key at once across
//     processes (package inflight), at most the limit an AIMD adaptive
//     limiter finds for this process (package adaptive), and requests of
//     class sheddable or background (X-Priority) shed above 80% of that
//     limit (package adaptive/shed);
//   - /metrics: the Prometheus exposition, never limited;
//   - /healthz: never limited.
//
// One Observer, the adapter's, goes to every component, under the names
// "api", "search" and "export" (the limiters' names, floodgate.Options.Name,
// label their decisions). The limits live in memory unless
// REDIS_ADDR names a Redis server; then the store fails open: while Redis
// is down, requests are admitted, and
// floodgate_store_failures_total{policy="open"} counts them.
//
//	go run .
//	REDIS_ADDR=127.0.0.1:6379 go run . -addr 127.0.0.1:8080
//	curl -i localhost:8080/api/hello
//	curl -s localhost:8080/metrics | grep ^floodgate_
//
// At start it prints the PromQL queries of the Grafana dashboard
// (fgprom/dashboard/floodgate.json), with the dashboard's variables
// filled in, ready for Prometheus' expression browser.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/floodgate-go/floodgate/fgprom"
	"github.com/floodgate-go/floodgate/fgprom/dashboard"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	quiet := flag.Bool("quiet", false, "do not print the dashboard's queries")
	flag.Parse()

	if !*quiet {
		if err := printQueries(os.Stdout, "1m"); err != nil {
			log.Fatal(err)
		}
	}
	svc, err := newService(config{redisAddr: os.Getenv("REDIS_ADDR")})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: svc.handler, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("listening on http://%s (limits in %s); metrics at /metrics", *addr, svc.where)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		log.Print(err)
	}
}

// config is what a service is built from.
type config struct {
	// redisAddr is the Redis server of the limits; "" keeps them in
	// memory.
	redisAddr string
	// alg is the limit per key; nil means 20 at once, then 10 a second.
	alg floodgate.Algorithm
}

// service is the example's HTTP handler and what it holds.
type service struct {
	handler  http.Handler
	registry *prometheus.Registry
	where    string       // where the limits live, for the log
	close    func() error // closes the store (which reports its last failures) and the client
}

// Close closes the store and the Redis client. The metrics stay served.
func (s *service) Close() error { return s.close() }

// newService builds the API: the Prometheus adapter, the store (named
// "redis" in the metrics; memstore reports nothing), the limiters and the
// middleware.
func newService(cfg config) (*service, error) {
	metrics, err := fgprom.New(nil)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs := metrics.Observer()

	alg := cfg.alg
	if alg == nil {
		alg = floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 20}
	}
	svc := &service{registry: reg}
	var closers []func() error // in the order they run
	svc.close = func() error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c())
		}
		closers = nil
		return errors.Join(errs...)
	}
	// The rate limits' store, and the in-flight limit's: the same Redis,
	// or in memory one of each kind.
	var store floodgate.Store
	var slots inflight.Store
	if cfg.redisAddr != "" {
		client := redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
		rs, err := redisstore.New(client, &redisstore.Options{
			Name:      "redis",
			Observer:  obs,
			OnFailure: redisstore.FailOpen, // admit while Redis is down, and count it
		})
		if err != nil {
			_ = client.Close()
			return nil, err
		}
		store, slots, svc.where = rs, rs, "Redis at "+cfg.redisAddr
		closers = append(closers, rs.Close, client.Close)
	} else {
		ms, err := memstore.New(nil)
		if err != nil {
			return nil, err
		}
		store, slots, svc.where = ms, inflight.NewLocalStore(), "memory"
	}
	key := httplimit.KeyChain(httplimit.KeyByAPIKey("X-API-Key"), httplimit.KeyByIP(nil))
	hello, err := helloMiddleware(store, alg, key, obs)
	if err != nil {
		_ = svc.close()
		return nil, err
	}
	search, closeSearch, err := searchMiddleware(store, key, obs)
	if err != nil {
		_ = svc.close()
		return nil, err
	}
	// Lease pools give their units back before the store closes.
	closers = append([]func() error{closeSearch}, closers...)
	export, closeExport, err := exportMiddleware(slots, key, obs)
	if err != nil {
		_ = svc.close()
		return nil, err
	}
	closers = append([]func() error{closeExport}, closers...)

	mux := http.NewServeMux()
	mux.Handle("/api/hello", hello(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})))
	mux.Handle("/api/search", search(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "results\n")
	})))
	mux.Handle("/api/export", export(http.HandlerFunc(serveExport)))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	svc.handler = mux
	return svc, nil
}

// helloMiddleware limits /api/hello: alg per key, on the store wrapped by
// observe.Store, each decision reported under the limiter's name, "api".
func helloMiddleware(store floodgate.Store, alg floodgate.Algorithm, key httplimit.KeyFunc, obs *observe.Observer) (func(http.Handler) http.Handler, error) {
	observed, err := observe.Store(store, obs)
	if err != nil {
		return nil, err
	}
	limiter, err := floodgate.New(observed, alg, &floodgate.Options{Name: "api"})
	if err != nil {
		return nil, err
	}
	return httplimit.New(limiter, &httplimit.Options{Key: key})
}

// searchMiddleware limits /api/search through lease pools over the store:
// the limiter "search" decides on the lease.Store wrapped by
// observe.Store, so its decisions, those served from the pools included,
// are reported under its name, and so are the pools' round trips to the
// store (lease.Options.Observer). The store under the pools is not
// observed: its steps would be the pools' refills, counted again under
// the same name.
func searchMiddleware(store floodgate.Store, key httplimit.KeyFunc, obs *observe.Observer) (func(http.Handler) http.Handler, func() error, error) {
	pools, err := lease.New(store, &lease.Options{Observer: obs})
	if err != nil {
		return nil, nil, err
	}
	observed, err := observe.Store(pools, obs)
	if err != nil {
		_ = pools.Close()
		return nil, nil, err
	}
	limiter, err := floodgate.New(observed, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200}, &floodgate.Options{Name: "search"})
	if err != nil {
		_ = pools.Close()
		return nil, nil, err
	}
	mw, err := httplimit.New(limiter, &httplimit.Options{Key: key})
	if err != nil {
		_ = pools.Close()
		return nil, nil, err
	}
	return mw, pools.Close, nil
}

// exportMiddleware guards /api/export with the shedder, the adaptive
// limiter and the in-flight limit, all named "export".
func exportMiddleware(store inflight.Store, key httplimit.KeyFunc, obs *observe.Observer) (func(http.Handler) http.Handler, func() error, error) {
	aimd, err := adaptive.NewAIMD(&adaptive.AIMDOptions{InitialLimit: 10, MinLimit: 4, MaxLimit: 40, Timeout: 100 * time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	concurrency, err := adaptive.NewLimiter(aimd, &adaptive.LimiterOptions{Name: "export", Observer: obs})
	if err != nil {
		return nil, nil, err
	}
	limitMW, err := adaptive.Middleware(concurrency, nil)
	if err != nil {
		return nil, nil, err
	}
	shedder, err := shed.New(concurrency, &shed.Options{Name: "export", Observer: obs})
	if err != nil {
		return nil, nil, err
	}
	shedMW, err := shed.Middleware(shedder, &shed.MiddlewareOptions{
		Class: func(r *http.Request) string { return r.Header.Get("X-Priority") },
	})
	if err != nil {
		return nil, nil, err
	}
	perKey, err := inflight.New(store, 2, &inflight.Options{Name: "export", Observer: obs})
	if err != nil {
		return nil, nil, err
	}
	perKeyMW, err := httplimit.NewInflight(perKey, &httplimit.InflightOptions{Key: key})
	if err != nil {
		_ = perKey.Close()
		return nil, nil, err
	}
	return func(next http.Handler) http.Handler {
		return shedMW(limitMW(perKeyMW(next)))
	}, perKey.Close, nil
}

// serveExport works for ?ms= milliseconds (20 by default, at most 1000),
// or until the request ends.
func serveExport(w http.ResponseWriter, r *http.Request) {
	d := 20 * time.Millisecond
	if ms, err := strconv.Atoi(r.URL.Query().Get("ms")); err == nil && ms >= 0 {
		d = time.Duration(min(ms, 1000)) * time.Millisecond
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		_, _ = io.WriteString(w, "exported\n")
	case <-r.Context().Done():
	}
}

// variable matches a Grafana variable in a query: $name or ${name}.
var variable = regexp.MustCompile(`\$\{?(\w+)\}?`)

// expand fills in a dashboard query's variables for Prometheus itself:
// Grafana's rate interval becomes rate, and a selection ($limiter,
// $store, which the dashboard matches with =~) becomes every value.
func expand(expr, rate string) string {
	return variable.ReplaceAllStringFunc(expr, func(v string) string {
		switch variable.FindStringSubmatch(v)[1] {
		case "__rate_interval", "__interval":
			return rate
		}
		return ".*"
	})
}

// printQueries writes every panel's queries, with rate for Grafana's rate
// interval.
func printQueries(w io.Writer, rate string) error {
	panels, err := dashboard.Panels()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "The dashboard's queries (fgprom/dashboard/floodgate.json), with $__rate_interval = %s:\n", rate)
	for _, p := range panels {
		fmt.Fprintf(w, "\n# %s\n", p.Title)
		for _, q := range p.Queries {
			fmt.Fprintln(w, expand(q.Expr, rate))
		}
	}
	fmt.Fprintln(w)
	return nil
}
