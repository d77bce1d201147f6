// Command plans serves a search API whose callers are on one of two plans,
// each several limits decided as one (a floodgate.Limits), chosen per
// request by package httplimit's NewPlans:
//
//   - free, every API key not beginning with "pro_": a token bucket of 5
//     per second with bursts of 5, and an exact sliding log of 20 per
//     minute;
//   - pro, API keys beginning with "pro_": a token bucket of 50 per second
//     with bursts of 50, and a sliding window counter of 1,000 per minute.
//
// GET /api/search is keyed by the X-API-Key field, which the store never
// sees as it is (httplimit.KeyByAPIKey keeps a SHA-256 digest of it); a
// request without one is answered 401. Every limited response carries the
// IETF RateLimit-Policy and RateLimit fields listing both limits of the
// caller's plan, the one that bound first; a denial is a 429 with
// Retry-After and a JSON body naming that limit.
//
//	go run ./examples/plans -addr 127.0.0.1:8080
//	curl -i -H 'X-API-Key: k1' '127.0.0.1:8080/api/search?q=rate'
//
// The limits live in memory unless REDIS_ADDR names a Redis server, which
// then holds them for every instance (the Redis store must run a
// floodgate.Limits; until it does, the server says so and exits):
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/plans
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	flag.Parse()

	cfg := config{redisAddr: os.Getenv("REDIS_ADDR")}
	handler, closeStore, err := newHandler(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := closeStore(); err != nil {
			log.Print(err)
		}
	}()

	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	where := "in memory"
	if cfg.redisAddr != "" {
		where = "on Redis at " + cfg.redisAddr
	}
	log.Printf("listening on http://%s, limits %s", *addr, where)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
	}
}

// config holds what main reads from the environment; tests build it
// directly.
type config struct {
	redisAddr string          // "" keeps the limits in memory
	store     floodgate.Store // set by tests: used instead of either
}

// The plans: their limits and the names the RateLimit fields give them.
// Both plans' limiters share one store and one name ("api", below), so a
// key keeps one state whatever its plan (see httplimit.NewPlans); here a
// key's plan follows from the key itself and never changes.
var plans = []struct {
	name   string
	limits floodgate.Limits
	names  []string
}{
	{"free", floodgate.Limits{
		floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5},
		floodgate.SlidingLog{Limit: 20, Window: time.Minute},
	}, []string{"free-per-second", "free-per-minute"}},
	{"pro", floodgate.Limits{
		floodgate.TokenBucket{Rate: 50, Per: time.Second, Burst: 50},
		floodgate.SlidingWindow{Limit: 1000, Window: time.Minute},
	}, []string{"pro-per-second", "pro-per-minute"}},
}

// planOf chooses a request's plan from its API key.
func planOf(r *http.Request) string {
	if strings.HasPrefix(r.Header.Get("X-API-Key"), "pro_") {
		return "pro"
	}
	return "free"
}

// newHandler builds the store, a limiter per plan and the routes;
// closeStore releases the store's connections.
func newHandler(cfg config) (h http.Handler, closeStore func() error, err error) {
	release := func() error { return nil }
	store := cfg.store
	switch {
	case store != nil:
	case cfg.redisAddr != "":
		client := redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
		rs, err := redisstore.New(client, &redisstore.Options{Prefix: "plans:"})
		if err != nil {
			_ = client.Close()
			return nil, nil, err
		}
		store = rs
		release = func() error { return errors.Join(rs.Close(), client.Close()) }
	default:
		if store, err = memstore.New(nil); err != nil {
			return nil, nil, err
		}
	}
	defer func() {
		if err != nil {
			_ = release()
		}
	}()

	// Every plan's limiter is built here, once; a request only picks one.
	// They share one name, so that a key moving to another plan keeps
	// what the limits of a kind the plans share have counted (see
	// floodgate.Store), rather than starting with fresh quotas.
	var list []httplimit.Plan
	names := map[string][]string{}
	for _, p := range plans {
		lim, err := floodgate.New(store, p.limits, &floodgate.Options{Name: "api"})
		if err != nil {
			return nil, nil, fmt.Errorf("plan %s: %w", p.name, err)
		}
		list = append(list, httplimit.Plan{Name: p.name, Limiter: lim, PolicyNames: p.names})
		names[p.name] = p.names
	}
	limit, err := httplimit.NewPlans(list, planOf, &httplimit.Options{
		Key: httplimit.KeyByAPIKey("X-API-Key"),
		OnDecision: func(r *http.Request, key string, d floodgate.Decision) {
			if !d.Allowed {
				plan := planOf(r)
				log.Printf("%s %s: %s key %s denied by %s, retry in %v",
					r.Method, r.URL.Path, plan, key, names[plan][d.Binding], d.RetryAfter)
			}
		},
		OnError: func(r *http.Request, key string, err error) {
			log.Printf("%s %s: key %q not decided: %v", r.Method, r.URL.Path, key, err)
		},
	})
	if err != nil {
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /api/search", limit(http.HandlerFunc(search)))
	return mux, release, nil
}

// search answers a query with an empty result list: the limits, not the
// search, are what this example shows.
func search(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Query   string   `json:"query"`
		Results []string `json:"results"`
	}{r.URL.Query().Get("q"), []string{}})
}
