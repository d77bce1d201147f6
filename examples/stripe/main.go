// Command stripe serves an API behind the four tiers Stripe described for
// its rate limiters and load shedders, one net/http middleware each, in the
// order a request meets them:
//
//  1. a request-rate limiter: a token bucket of 50 requests a second with
//     bursts of 20 per API key (httplimit.New over floodgate.New), 429
//     with the IETF RateLimit fields and Retry-After;
//  2. a concurrent-request limiter: 3 requests in flight per API key
//     (httplimit.NewInflight over package inflight), 429 with Retry-After,
//     so that a user whose requests get slow cannot hold every worker;
//  3. a fleet usage load shedder: once the fleet's workers are 80% busy,
//     only critical requests are served (shed.Shedder on a shed.Fleet), so
//     that 20% of the capacity stays with them; 503 with Retry-After;
//  4. a worker utilization shedder: this server's 20 workers (an
//     adaptive.Limiter, whose partition guarantees critical requests 4 of
//     them) shed background requests at 50% busy, sheddable ones at 70%,
//     default ones at 90% and critical ones never (shed.Shedder on the
//     limiter's Utilization), and the limiter answers 503 when its workers
//     are all taken.
//
// GET /v1/charges does the work: it holds a worker for ?ms= milliseconds
// (20 by default). A request names its API key in X-API-Key (kept by the
// stores as a SHA-256 digest) and its criticality in X-Priority: critical,
// default (also when absent or unknown), sheddable or background.
//
//	go run ./examples/stripe -addr 127.0.0.1:8080
//	curl -i -H 'X-API-Key: k1' -H 'X-Priority: sheddable' '127.0.0.1:8080/v1/charges?ms=50'
//
// With -demo it serves on a loopback port of its own instead, drives a
// scripted overload against itself (steady users sending default and
// critical requests throughout, a client sending as fast as it can, an
// abusive user holding slow requests, and a burst of non-critical
// traffic, the least important first), prints what each tier rejected,
// and exits:
//
//	go run ./examples/stripe -demo
//
// It needs nothing but itself, unlike a demo driven with curl; serving is
// the default, as for the other HTTP examples.
//
// Everything lives in this process unless REDIS_ADDR names a Redis server:
// then the rate limits and the requests in flight are kept in Redis (one
// script call per rate decision, two per request in flight, see
// redisstore), and the fleet's load is exchanged through it every 10ms
// (redisstore's Store.FleetSource), so that every instance of the server shares tiers 1 to
// 3. On one process, the fleet of tier 3 is that process alone: tier 3
// then sheds on the same utilization as tier 4, and it is with several
// processes, unevenly loaded or sharing a backend, that the two differ.
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/stripe -demo
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address (not used with -demo)")
	demo := flag.Bool("demo", false, "drive a scripted overload against a server on a loopback port, print what each tier rejected, and exit")
	flag.Parse()

	cfg := config{redisAddr: os.Getenv("REDIS_ADDR")}
	if *demo {
		// A prefix of the run's own: a run never meets the keys of an
		// earlier one (a killed run's holds live until their TTL).
		cfg.prefix = fmt.Sprintf("stripe-demo-%d:", time.Now().UnixNano())
		if err := runDemo(context.Background(), cfg, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	srv, err := newServer(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			log.Print(err)
		}
	}()
	hs := &http.Server{Addr: *addr, Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdown)
	}()
	log.Printf("listening on http://%s, tiers 1 to 3 %s", *addr, srv.where)
	if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
	}
}

// config holds what main reads from the environment; tests build it
// directly.
type config struct {
	redisAddr string                // "" keeps every tier in this process
	redis     redis.UniversalClient // set by tests: used instead of redisAddr
	prefix    string                // of every Redis key; "" means "stripe:"
	// redisTimeout is redisstore.Options.Timeout, 0 for its default
	// (50ms); tests on a loaded machine raise it, so that the tiers'
	// answers are Redis's rather than the local fallback's.
	redisTimeout time.Duration
}

// The tiers' settings.
const (
	apiKeyHeader   = "X-API-Key"
	priorityHeader = "X-Priority"

	ratePerSecond = 50 // tier 1: requests a second per API key,
	rateBurst     = 20 // with bursts of this many
	maxInFlight   = 3  // tier 2: requests in flight per API key
	workers       = 20 // tier 4: requests this server works on at once
	// criticalShare of the workers is guaranteed to critical requests
	// (ceil(20·0.2) = 4), however many the other classes hold.
	criticalShare = 0.2
	defaultWork   = 20 * time.Millisecond
	maxWork       = 10 * time.Second
)

// fleetThresholds is tier 3's rule, Stripe's fleet usage load shedder:
// every class but critical is shed at 80% of the fleet's capacity, so the
// last 20% stays with critical requests (Critical: zero means Never).
var fleetThresholds = shed.Thresholds{Default: 0.8, Sheddable: 0.8, Background: 0.8}

// workerThresholds is tier 4's rule, Stripe's worker utilization load
// shedder: the least important classes first, as a worker fills up, and
// critical requests never.
var workerThresholds = shed.Thresholds{Default: 0.9, Sheddable: 0.7, Background: 0.5}

// Codes of the JSON bodies of the answers, one per tier. Tiers 1 and 2
// use httplimit's bodies and codes; tiers 3 and 4 write theirs.
const (
	codeRate        = "rate_limit_exceeded"        // tier 1 (httplimit)
	codeInflight    = "concurrency_limit_exceeded" // tier 2 (httplimit)
	codeFleet       = "fleet_overloaded"           // tier 3
	codeWorker      = "worker_overloaded"          // tier 4, shed by utilization
	codeWorkersFull = "workers_busy"               // tier 4, every worker taken
)

// server is the API behind its four tiers. It is an http.Handler; Close
// releases what it holds.
type server struct {
	http.Handler
	where    string // where tiers 1 to 3 keep their state, for people
	workers  *adaptive.Limiter
	fleet    *shed.Fleet
	inflight *inflight.Limiter
	peaks    peaks
	// On Redis: the decisions and Acquires made in this process because
	// Redis did not answer in time (FailLocal), and the Releases Redis
	// failed, whose slots stay taken until their TTL.
	onRedis                       bool
	redisTimeout                  time.Duration
	redisFallbacks, releaseErrors atomic.Int64
	closeOnce                     sync.Once
	closers                       []func() error // in the order to call them
}

// newServer builds the stores, the four tiers and the route.
func newServer(cfg config) (s *server, err error) {
	s = &server{where: "in this process (memstore)"}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	prefix := cfg.prefix
	if prefix == "" {
		prefix = "stripe:"
	}

	// The stores: one for the rate limits and one for the requests in
	// flight (a memstore.Store or a redisstore.Store is both), and the
	// fleet's exchange.
	var (
		rates floodgate.Store
		holds inflight.Store
		src   shed.FleetSource
	)
	client := cfg.redis
	if client == nil && cfg.redisAddr != "" {
		c := redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
		s.closers = append(s.closers, c.Close)
		client = c
	}
	if client != nil {
		rs, err := redisstore.New(client, &redisstore.Options{
			Prefix:  prefix,
			Timeout: cfg.redisTimeout,
			// A decision Redis does not make within Timeout is made in
			// this process, on a local store with the whole quota (with N
			// processes, LocalShare 1/N would keep about the quota).
			// Stripe's limiters fail open; this stays limited.
			OnFailure: redisstore.FailLocal,
			// The store counts the decisions it could not make and
			// reports them once per FailureInterval; Close reports the
			// rest, so the count is whole once the server is closed.
			Observer: &observe.Observer{
				OnFailures: func(_ context.Context, f observe.Failures) { s.redisFallbacks.Add(f.Count) },
			},
		})
		if err != nil {
			return nil, err
		}
		s.closers = append([]func() error{rs.Close}, s.closers...)
		rates, holds = rs, releaseCounter{rs, &s.releaseErrors}
		src, err = rs.FleetSource("fleet", 100*time.Millisecond)
		if err != nil {
			return nil, err
		}
		s.onRedis, s.redisTimeout = true, cfg.redisTimeout
		if s.redisTimeout == 0 {
			s.redisTimeout = redisstore.DefaultTimeout
		}
		s.where = "on Redis, shared by every process"
		if cfg.redisAddr != "" {
			s.where += " at " + cfg.redisAddr
		}
	} else {
		ms, err := memstore.New(nil)
		if err != nil {
			return nil, err
		}
		rates, holds = ms, inflight.NewLocalStore()
		// A fleet of one: this process's load is the fleet's.
		src = shed.FleetSourceFunc(func(_ context.Context, local shed.Load) (shed.Load, error) { return local, nil })
	}

	// Tier 1: requests per second per API key.
	rateLimiter, err := floodgate.New(rates, floodgate.TokenBucket{Rate: ratePerSecond, Per: time.Second, Burst: rateBurst}, nil)
	if err != nil {
		return nil, err
	}
	tier1, err := httplimit.New(rateLimiter, &httplimit.Options{
		Key:         httplimit.KeyByAPIKey(apiKeyHeader),
		PolicyNames: []string{"requests-per-second"},
	})
	if err != nil {
		return nil, err
	}

	// Tier 2: requests in flight per API key.
	if s.inflight, err = inflight.New(holds, maxInFlight, nil); err != nil {
		return nil, err
	}
	s.closers = append([]func() error{s.inflight.Close}, s.closers...)
	tier2, err := httplimit.NewInflight(s.inflight, &httplimit.InflightOptions{Key: httplimit.KeyByAPIKey(apiKeyHeader)})
	if err != nil {
		return nil, err
	}

	// The workers: a fixed pool, so that the demo's counts do not depend
	// on the machine's latency. A server whose capacity moves gives the
	// Limiter an adaptive limit (adaptive.NewVegas) instead.
	limit, err := adaptive.NewFixed(workers)
	if err != nil {
		return nil, err
	}
	s.workers, err = adaptive.NewLimiter(limit, &adaptive.LimiterOptions{
		Partitions: []adaptive.Partition{{Name: adaptive.ClassCritical, Share: criticalShare}},
	})
	if err != nil {
		return nil, err
	}

	// Tier 3: the fleet's workers, busy over total, exchanged every 10ms.
	if s.fleet, err = shed.NewFleet(src, shed.LimiterLoad(s.workers), nil); err != nil {
		return nil, err
	}
	s.closers = append([]func() error{s.fleet.Close}, s.closers...)
	fleetShedder, err := shed.New(s.fleet, &shed.Options{Thresholds: fleetThresholds})
	if err != nil {
		return nil, err
	}
	tier3, err := shed.Middleware(fleetShedder, &shed.MiddlewareOptions{
		Class:    classOf,
		Rejected: overloaded(codeFleet, "The fleet is at 80% of its capacity or more: only critical requests are served."),
	})
	if err != nil {
		return nil, err
	}

	// Tier 4: this server's workers, by priority, then the pool itself.
	workerShedder, err := shed.New(s.workers, &shed.Options{Thresholds: workerThresholds})
	if err != nil {
		return nil, err
	}
	tier4, err := shed.Middleware(workerShedder, &shed.MiddlewareOptions{
		Class:    classOf,
		Rejected: overloaded(codeWorker, "This server's workers are too busy for the request's priority."),
	})
	if err != nil {
		return nil, err
	}
	pool, err := adaptive.Middleware(s.workers, &adaptive.MiddlewareOptions{
		Partition: classOf,
		Rejected:  overloaded(codeWorkersFull, "Every worker of this server is busy."),
	})
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /v1/charges", tier1(tier2(tier3(tier4(pool(http.HandlerFunc(s.charge)))))))
	s.Handler = mux
	return s, nil
}

// Close stops the fleet's exchanges and the in-flight renewals, and closes
// the Redis store and client. It is safe to call more than once.
func (s *server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		for _, c := range s.closers {
			err = errors.Join(err, c())
		}
	})
	return err
}

// classOf is a request's criticality, from X-Priority: one of adaptive's
// four classes, default for anything else. The shedders and the workers'
// partitions read it.
func classOf(r *http.Request) string {
	switch c := strings.ToLower(r.Header.Get(priorityHeader)); c {
	case adaptive.ClassCritical, adaptive.ClassSheddable, adaptive.ClassBackground:
		return c
	default:
		return adaptive.ClassDefault
	}
}

// overloaded writes the 503 of a shedding tier (Retry-After is already
// set) with a JSON body in the shape of httplimit's.
func overloaded(code, message string) http.Handler {
	body, err := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	body = append(body, '\n')
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(body)
	})
}

// charge holds a worker for the request's ?ms= (or until the client goes
// away) and answers 200.
func (s *server) charge(w http.ResponseWriter, r *http.Request) {
	work := defaultWork
	if v := r.URL.Query().Get("ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxWork {
			http.Error(w, "ms must be a whole number of milliseconds from 0 to 10000", http.StatusBadRequest)
			return
		}
		work = time.Duration(ms) * time.Millisecond
	}
	user := r.Header.Get(apiKeyHeader)
	s.peaks.enter(user)
	defer s.peaks.leave(user)
	if work > 0 {
		t := time.NewTimer(work)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"succeeded"}`+"\n")
}

// peaks counts the requests of each API key inside the handler, past every
// tier, and the most there were at once: what tier 2 bounds.
type peaks struct {
	mu   sync.Mutex
	now  map[string]int
	peak map[string]int
}

func (p *peaks) enter(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.now == nil {
		p.now, p.peak = map[string]int{}, map[string]int{}
	}
	p.now[user]++
	p.peak[user] = max(p.peak[user], p.now[user])
}

func (p *peaks) leave(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[user]--
}

// of returns the most requests of user that were in the handler at once.
func (p *peaks) of(user string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak[user]
}

// releaseCounter is a redisstore.Store as an inflight.Store, counting the
// Releases that fail. Such a slot stays taken until its hold's TTL (10s by
// default), and httplimit has no way to say so: a Release runs after the
// response.
type releaseCounter struct {
	*redisstore.Store
	failed *atomic.Int64
}

func (c releaseCounter) Release(ctx context.Context, name, key string, h inflight.Hold) error {
	err := c.Store.Release(ctx, name, key, h)
	if err != nil {
		c.failed.Add(1)
	}
	return err
}
