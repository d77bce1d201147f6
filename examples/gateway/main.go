// Command gateway is an API gateway whose instances share one quota per
// caller in Redis, while serving almost every decision from memory: a lease
// pool (package lease) in front of floodgate's Redis store takes units from
// Redis in batches and hands them out locally, and gives the unused ones
// back on shutdown.
//
// Each caller (X-API-Key, else the client address) may send 1,000 requests
// per second with bursts of 2,000, across all instances; every response
// carries the IETF RateLimit fields, and a denial is a 429 with Retry-After.
// The gateway prints its local hit ratio, the share of decisions made
// without a round trip to Redis, every few seconds.
//
//	go run ./examples/gateway                  # on an embedded Redis (miniredis)
//	REDIS_ADDR=localhost:6379 go run ./examples/gateway -addr :8081
//	curl -i localhost:8080/api/hello
//
// With -load, it drives itself instead of listening: 64 goroutines send
// requests through the handler as 64 callers for the given time, then it
// prints the hit ratio and exits (with -callers 4, each caller sends more
// than its quota, and denials follow):
//
//	go run ./examples/gateway -load 5s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	load := flag.Duration("load", 0, "drive the gateway with 64 goroutines for this long, print the hit ratio and exit")
	callers := flag.Int("callers", 64, "with -load: the number of callers (API keys) the goroutines send as")
	every := flag.Duration("stats", 5*time.Second, "how often to print the hit ratio while serving")
	flag.Parse()

	g, err := newGateway(config{redisAddr: os.Getenv("REDIS_ADDR")})
	if err != nil {
		log.Fatal(err)
	}
	if *load > 0 {
		res := drive(g.handler, 64, max(*callers, 1), *load)
		if err := g.Close(); err != nil {
			log.Print(err)
		}
		fmt.Printf("%d requests in %v (%.0f/s): %d admitted, %d denied, %d failed\n",
			res.total(), *load, float64(res.total())/load.Seconds(), res.ok, res.denied, res.other)
		fmt.Println(describe(g.leases.Stats()))
		return
	}

	srv := &http.Server{Addr: *addr, Handler: g.handler, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		tick := time.NewTicker(*every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(shutdown)
				return
			case <-tick.C:
				log.Print(describe(g.leases.Stats()))
			}
		}
	}()
	log.Printf("listening on http://%s (Redis: %s)", *addr, g.redis)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	// Give the units still leased back to Redis for the other instances.
	if err := g.Close(); err != nil {
		log.Print(err)
	}
	log.Print(describe(g.leases.Stats()))
}

// config holds what main reads from the environment; tests build it
// directly.
type config struct {
	redisAddr string              // "" starts an embedded miniredis
	alg       floodgate.Algorithm // nil: 1,000 per second, bursts of 2,000
	minBatch  int64               // 0: lease.Options' default
	timeout   time.Duration       // Redis calls; 0: 100ms
}

// gateway is the handler with the resources it owns.
type gateway struct {
	handler   http.Handler
	leases    *lease.Store
	redis     string // for the log
	redisAddr string
	closers   []func() error
}

// newGateway builds the gateway: Redis (or miniredis), the store, the
// lease layer over it, the limiter and the middleware.
func newGateway(cfg config) (g *gateway, err error) {
	g = &gateway{redis: cfg.redisAddr}
	defer func() {
		if err != nil {
			_ = g.Close()
		}
	}()
	if g.redis == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		g.closers = append(g.closers, func() error { m.Close(); return nil })
		g.redis = "embedded miniredis at " + m.Addr()
		cfg.redisAddr = m.Addr()
	}
	g.redisAddr = cfg.redisAddr
	client := redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
	g.closers = append(g.closers, client.Close)
	// Refills are few and off the request path, so a timeout looser than
	// the default 50ms costs little; miniredis, which runs the scripts' Lua
	// in Go, needs it on a busy machine.
	if cfg.timeout == 0 {
		cfg.timeout = 100 * time.Millisecond
	}
	store, err := redisstore.New(client, &redisstore.Options{Prefix: "gateway:", Timeout: cfg.timeout})
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, store.Close)

	alg := cfg.alg
	if alg == nil {
		alg = floodgate.TokenBucket{Rate: 1000, Per: time.Second, Burst: 2000}
	}
	// The defaults: batches sized to about 100ms of each caller's traffic,
	// at most 1/16 of the quota per instance, returned after 1s idle.
	if g.leases, err = lease.New(store, &lease.Options{MinBatch: cfg.minBatch}); err != nil {
		return nil, err
	}
	g.closers = append(g.closers, g.leases.Close)
	lim, err := floodgate.New(g.leases, alg, &floodgate.Options{Name: "api"})
	if err != nil {
		return nil, err
	}

	limit, err := httplimit.New(lim, &httplimit.Options{
		Key: httplimit.KeyChain(httplimit.KeyByAPIKey("X-API-Key"), httplimit.KeyByIP(nil)),
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "hello\n")
	})))
	g.handler = mux
	return g, nil
}

// Close gives the leased units back to Redis and releases the gateway's
// resources, the lease first.
func (g *gateway) Close() error {
	var errs []error
	for i := len(g.closers) - 1; i >= 0; i-- {
		errs = append(errs, g.closers[i]())
	}
	g.closers = nil
	return errors.Join(errs...)
}

// describe formats the lease layer's counts and its local hit ratio.
func describe(s lease.Stats) string {
	return fmt.Sprintf("local hit ratio %.2f%%: %d decisions local, %d waited for a lease, %d went to Redis; %d leases of %d units, %d units returned",
		100*s.LocalRatio(), s.Local, s.Waited, s.Forwarded, s.Leases, s.Leased, s.Returned)
}

// result counts the responses of drive.
type result struct{ ok, denied, other int64 }

func (r result) total() int64 { return r.ok + r.denied + r.other }

// minCalls is the fewest requests each worker of drive sends.
const minCalls = 50

// drive sends requests through h from workers goroutines, as callers
// numbered 0 to callers−1 (by API key), for d and at least minCalls each.
func drive(h http.Handler, workers, callers int, d time.Duration) result {
	var ok, denied, other atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := "caller-" + strconv.Itoa(w%callers)
			// At least minCalls per worker, so that a slow machine still
			// sends enough requests for the pools to matter.
			for i := 0; i < minCalls || time.Now().Before(deadline); i++ {
				req := httptest.NewRequest(http.MethodGet, "/api/hello", nil)
				req.Header.Set("X-API-Key", key)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				switch rec.Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return result{ok: ok.Load(), denied: denied.Load(), other: other.Load()}
}
