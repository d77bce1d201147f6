// Command httpserver serves a small API behind floodgate's net/http
// middleware (package httplimit), on the in-process store:
//
//   - /api/hello: 5 requests at once, then one every 6 seconds, per API key
//     (X-API-Key) or, without one, per client address;
//   - /api/report: a costly endpoint (5 units per request) sharing the same
//     quota, answered with RFC 9457 problem details when denied;
//   - /api/export: shaped rather than refused: a leaky bucket lets one
//     request through every 500ms and holds the others up to 3s;
//   - /healthz: never limited.
//
// Every limited response carries the IETF RateLimit-Policy and RateLimit
// fields; a denial is a 429 with Retry-After and a JSON body.
//
//	go run ./examples/httpserver
//	curl -i localhost:8080/api/hello
//
// Behind a reverse proxy, name its network so that X-Forwarded-For is
// believed from it, and from nobody else:
//
//	go run ./examples/httpserver -trusted-proxy 10.0.0.0/8
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	proxies := flag.String("trusted-proxy", "", "comma-separated CIDRs of trusted reverse proxies")
	shadow := flag.Bool("shadow", false, "report decisions without enforcing them")
	flag.Parse()

	cfg := config{shadow: *shadow}
	for _, s := range strings.Split(*proxies, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			log.Fatalf("-trusted-proxy: %v", err)
		}
		cfg.trusted = append(cfg.trusted, p)
	}
	handler, err := newHandler(cfg)
	if err != nil {
		log.Fatal(err)
	}

	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("listening on http://%s", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// config holds what main reads from flags; tests build it directly.
type config struct {
	trusted []netip.Prefix
	shadow  bool
	store   *memstore.Store // nil: a fresh store on the real clock
}

// newHandler builds the routes and their limiters.
func newHandler(cfg config) (http.Handler, error) {
	store := cfg.store
	if store == nil {
		var err error
		if store, err = memstore.New(nil); err != nil {
			return nil, err
		}
	}

	// One quota per caller for the API: a burst of 5, refilled at 10 per
	// minute.
	api, err := floodgate.New(store, floodgate.TokenBucket{Rate: 10, Per: time.Minute, Burst: 5}, nil)
	if err != nil {
		return nil, err
	}
	// Exports go to a slow backend: one every 500ms, at most 6 queued.
	exports, err := floodgate.New(store, floodgate.LeakyBucket{Rate: 2, Per: time.Second, Capacity: 6}, nil)
	if err != nil {
		return nil, err
	}

	key := httplimit.KeyChain(
		httplimit.KeyByAPIKey("X-API-Key"),
		httplimit.KeyByIP(&httplimit.IPKeyOptions{TrustedProxies: cfg.trusted}),
	)
	logDenials := func(r *http.Request, key string, d floodgate.Decision) {
		if !d.Allowed {
			log.Printf("%s %s: key %s denied, retry in %v", r.Method, r.URL.Path, key, d.RetryAfter)
		}
	}
	limit := func(lim *floodgate.Limiter, o httplimit.Options) (func(http.Handler) http.Handler, error) {
		o.Key, o.Shadow, o.OnDecision = key, cfg.shadow, logDenials
		return httplimit.New(lim, &o)
	}

	hello, err := limit(api, httplimit.Options{})
	if err != nil {
		return nil, err
	}
	report, err := limit(api, httplimit.Options{
		Cost:           func(*http.Request) int64 { return 5 },
		ProblemDetails: true,
	})
	if err != nil {
		return nil, err
	}
	export, err := limit(exports, httplimit.Options{
		MaxDelay:    3 * time.Second,
		PolicyNames: []string{"export"},
		Style:       headers.StyleIETF | headers.StyleX,
	})
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", hello(text("hello\n")))
	mux.Handle("GET /api/report", report(text("report ready\n")))
	mux.Handle("GET /api/export", export(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "export started at %s\n", time.Now().Format("15:04:05.000"))
	})))
	mux.Handle("GET /healthz", text("ok\n"))
	return mux, nil
}

func text(s string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, s)
	})
}
