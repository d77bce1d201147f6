// Command floodgate-rls runs floodgate's Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) as a gRPC server, with gRPC
// health checking, on an in-process store by default or on Redis or a Redis
// Cluster.
//
// It reads envoyproxy/ratelimit's configuration files and the environment
// variables of that service where they mean the same thing; a flag given
// on the command line wins over its variable:
//
//	-config            RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (a file or a directory of YAML files)
//	-grpc-addr         GRPC_HOST:GRPC_PORT (default 0.0.0.0:8081)
//	-backend           memory or redis; BACKEND_TYPE=redis selects redis (default memory)
//	-redis-url         REDIS_URL: host:port, or comma-separated seed nodes for a cluster
//	-redis-type        REDIS_TYPE: single or cluster (sentinel is not supported)
//	-redis-socket-type REDIS_SOCKET_TYPE: tcp or unix
//	-redis-auth        REDIS_AUTH: password, or user:password
//	-redis-pool-size   REDIS_POOL_SIZE
//	-redis-timeout     REDIS_TIMEOUT: per store call (default 10ms; the peer's is 10s)
//	-near-limit-ratio  NEAR_LIMIT_RATIO (default 0.8)
//	-metrics-addr      PROMETHEUS_ADDR when USE_PROMETHEUS=true; PROMETHEUS_PATH is the path
//	-headers           ietf, draft, x (comma-separated) or none; LIMIT_RESPONSE_HEADERS_ENABLED=true adds draft
//	-failure-mode      open, closed or error: a descriptor whose store call failed (default open)
//	-timeout           the store budget of one call (default 8ms)
//	-reload-every      how often the configuration files are read (default 250ms)
//	-descriptors       auto, parallel, in-order or joint: how a call's descriptors are decided (rls.Options.Parallel, rls.Options.Joint); auto is parallel on Redis, in order on memory
//	-grpc-workers      gRPC stream workers (default 256; 0: a goroutine per call)
//
// The last two are floodgate's own and have no variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/rls"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "floodgate-rls:", err)
		os.Exit(1)
	}
}

// settings are the flags after the environment filled their defaults.
type settings struct {
	config, grpcAddr, backend                    string
	redisURL, redisType, redisSocket, redisAuth  string
	redisPool, workers                           int
	descriptors                                  string
	redisTimeout, timeout, reloadEvery           time.Duration
	nearLimit                                    float64
	metricsAddr, metricsPath, headerStyle, onErr string
}

func parse(args []string, env func(string) string, stderr io.Writer) (settings, error) {
	get := func(k, def string) string {
		if v := env(k); v != "" {
			return v
		}
		return def
	}
	var s settings
	cfg := ""
	if root := env("RUNTIME_ROOT"); root != "" {
		cfg = filepath.Join(root, env("RUNTIME_SUBDIRECTORY"), get("RUNTIME_APPDIRECTORY", "config"))
	}
	backend := "memory"
	if strings.EqualFold(env("BACKEND_TYPE"), "redis") {
		backend = "redis"
	}
	headerStyle := "ietf"
	if strings.EqualFold(env("LIMIT_RESPONSE_HEADERS_ENABLED"), "true") {
		headerStyle = "ietf,draft"
	}
	metricsAddr := ""
	if strings.EqualFold(env("USE_PROMETHEUS"), "true") {
		metricsAddr = get("PROMETHEUS_ADDR", ":9090")
	}
	fs := flag.NewFlagSet("floodgate-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.config, "config", cfg, "configuration: a YAML file or a directory of them")
	fs.StringVar(&s.grpcAddr, "grpc-addr", net.JoinHostPort(get("GRPC_HOST", "0.0.0.0"), get("GRPC_PORT", "8081")), "gRPC listen address")
	fs.StringVar(&s.backend, "backend", backend, "store: memory or redis")
	fs.StringVar(&s.redisURL, "redis-url", env("REDIS_URL"), "Redis address, or comma-separated cluster seed nodes")
	fs.StringVar(&s.redisType, "redis-type", strings.ToLower(get("REDIS_TYPE", "single")), "single or cluster")
	fs.StringVar(&s.redisSocket, "redis-socket-type", strings.ToLower(get("REDIS_SOCKET_TYPE", "tcp")), "tcp or unix")
	fs.StringVar(&s.redisAuth, "redis-auth", env("REDIS_AUTH"), "Redis password, or user:password")
	pool, _ := strconv.Atoi(get("REDIS_POOL_SIZE", "0"))
	fs.IntVar(&s.redisPool, "redis-pool-size", pool, "connections per Redis node (0: go-redis' default)")
	rt, err := time.ParseDuration(get("REDIS_TIMEOUT", "10ms"))
	if err != nil {
		return s, fmt.Errorf("REDIS_TIMEOUT: %w", err)
	}
	fs.DurationVar(&s.redisTimeout, "redis-timeout", rt, "bound of one store call")
	fs.DurationVar(&s.timeout, "timeout", rls.DefaultTimeout, "store budget of one ShouldRateLimit")
	fs.DurationVar(&s.reloadEvery, "reload-every", rls.DefaultReloadEvery, "how often the configuration is read")
	nl, _ := strconv.ParseFloat(get("NEAR_LIMIT_RATIO", "0.8"), 64)
	fs.Float64Var(&s.nearLimit, "near-limit-ratio", nl, "share of a limit counted near_limit")
	fs.StringVar(&s.metricsAddr, "metrics-addr", metricsAddr, "Prometheus listen address (empty: none)")
	fs.StringVar(&s.metricsPath, "metrics-path", get("PROMETHEUS_PATH", "/metrics"), "Prometheus path")
	fs.StringVar(&s.headerStyle, "headers", headerStyle, "response fields: ietf, draft, x (comma-separated) or none")
	fs.StringVar(&s.onErr, "failure-mode", "open", "a descriptor whose store call failed: open, closed or error")
	fs.StringVar(&s.descriptors, "descriptors", "auto", "a call's descriptors decided at once (parallel), in order (in-order), as one script call on Redis (joint, else parallel), or auto: parallel on Redis, in order on memory")
	fs.IntVar(&s.workers, "grpc-workers", defaultWorkers, "gRPC stream workers (0: a new goroutine per call)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if s.config == "" {
		return s, errors.New("no configuration: set -config or RUNTIME_ROOT")
	}
	if s.workers < 0 || s.workers > maxWorkers {
		return s, fmt.Errorf("-grpc-workers %d: want 0 to %d", s.workers, maxWorkers)
	}
	switch s.descriptors {
	case "auto", "parallel", "in-order", "joint":
	default:
		return s, fmt.Errorf("-descriptors %q: want auto, parallel, in-order or joint", s.descriptors)
	}
	return s, nil
}

// defaultWorkers is -grpc-workers' default. gRPC runs each call on a new
// goroutine unless a stream worker is idle; a new goroutine's stack starts
// small and grows, by copying, twice on the way through a call (in gRPC's
// message read and in the store's reply decoding): 11% of the CPU profile
// of peertest's side-by-side run on Redis (client and service in one
// process). A worker keeps its grown stack. The count is not a limit:
// calls beyond the idle workers still get a goroutine of their own. 256
// idle workers hold about 2 MiB of stacks.
const defaultWorkers = 256

// maxWorkers bounds -grpc-workers: the workers start with the server.
const maxWorkers = 1 << 16

// parallel reports whether a call's descriptors are decided at once
// (rls.Options.Parallel). By default they are on Redis, where it saves a
// store round trip of latency per descriptor after the first, and not on
// memory, where a goroutine per descriptor only costs.
func parallel(s settings) bool {
	switch s.descriptors {
	case "parallel", "joint":
		return true
	case "in-order":
		return false
	}
	return s.backend == "redis"
}

// serverOptions are the gRPC server's options.
func serverOptions(s settings) []grpc.ServerOption {
	if s.workers == 0 {
		return nil
	}
	return []grpc.ServerOption{grpc.NumStreamWorkers(uint32(s.workers))}
}

// run serves until ctx ends. ready, when not nil, receives the gRPC
// address once the server listens.
func run(ctx context.Context, args []string, env func(string) string, stderr io.Writer, ready func(addr string)) error {
	s, err := parse(args, env, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts := &rls.Options{Timeout: s.timeout, NearLimitRatio: s.nearLimit, Logger: logger}
	switch s.onErr {
	case "open":
		opts.OnStoreError = rls.FailOpen
	case "closed":
		opts.OnStoreError = rls.FailClosed
	case "error":
		opts.OnStoreError = rls.FailError
	default:
		return fmt.Errorf("-failure-mode %q: want open, closed or error", s.onErr)
	}
	for _, h := range strings.Split(s.headerStyle, ",") {
		switch strings.TrimSpace(h) {
		case "ietf":
			opts.Headers |= headers.StyleIETF
		case "draft":
			opts.Headers |= headers.StyleDraft
		case "x":
			opts.Headers |= headers.StyleX
		case "none":
			opts.NoHeaders = true
		default:
			return fmt.Errorf("-headers %q: want ietf, draft, x or none", s.headerStyle)
		}
	}

	var store floodgate.Store
	switch s.backend {
	case "memory":
		ms, err := memstore.New(nil)
		if err != nil {
			return err
		}
		store = ms
	case "redis":
		rs, closeFn, err := redisStore(s)
		if err != nil {
			return err
		}
		defer closeFn()
		// Dial Redis and load the scripts before serving: the first calls
		// would otherwise pay for both, take longer than -timeout and be
		// decided by -failure-mode. A Redis that does not answer does
		// not keep the service from starting; it decides by
		// -failure-mode until Redis answers.
		pctx, pcancel := context.WithTimeout(ctx, startPing)
		if err := rs.Ping(pctx); err != nil {
			logger.Warn("floodgate-rls: Redis did not answer at start; deciding by -failure-mode until it does", "err", err)
		}
		pcancel()
		store = rs
		// Concurrent takes of one counter share a script run: see
		// rls.Options.Coalesce.
		opts.Coalesce = true
	default:
		return fmt.Errorf("-backend %q: want memory or redis", s.backend)
	}

	opts.Parallel = parallel(s)
	opts.Joint = s.descriptors == "joint"
	svc, err := rls.New(store, nil, opts)
	if err != nil {
		return err
	}
	defer svc.Close()
	w, err := rls.Watch(svc, s.config, s.reloadEvery)
	if err != nil {
		w.Close()
		return err
	}
	defer w.Close()

	lis, err := net.Listen("tcp", s.grpcAddr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(serverOptions(s)...)
	pb.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)

	var msrv *http.Server
	if s.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		if err := reg.Register(svc.Stats()); err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle(s.metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Addr: s.metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := msrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("floodgate-rls: metrics server", "err", err)
			}
		}()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	logger.Info("floodgate-rls: serving", "grpc", lis.Addr().String(), "backend", s.backend)
	if ready != nil {
		ready(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	hs.Shutdown()
	srv.GracefulStop()
	if msrv != nil {
		_ = msrv.Close()
	}
	return nil
}

// startPing bounds the start-up's wait for Redis.
const startPing = 2 * time.Second

func redisStore(s settings) (*redisstore.Store, func(), error) {
	if s.redisURL == "" {
		return nil, nil, errors.New("-backend redis needs -redis-url or REDIS_URL")
	}
	user, pass := "", s.redisAuth
	if u, p, ok := strings.Cut(s.redisAuth, ":"); ok {
		user, pass = u, p
	}
	// A refused connection fails at once rather than after go-redis'
	// default of 5 dials 100ms apart: a dead Redis then costs a decision
	// microseconds until the store's breaker opens, not the whole timeout.
	const dialerRetries = 1
	var rdb redis.UniversalClient
	switch s.redisType {
	case "single":
		rdb = redis.NewClient(&redis.Options{Network: s.redisSocket, Addr: s.redisURL, Username: user, Password: pass, PoolSize: s.redisPool, DialerRetries: dialerRetries})
	case "cluster":
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(s.redisURL, ","), Username: user, Password: pass, PoolSize: s.redisPool, DialerRetries: dialerRetries})
	default:
		return nil, nil, fmt.Errorf("-redis-type %q: want single or cluster", s.redisType)
	}
	rs, err := redisstore.New(rdb, redisOptions(s.redisTimeout))
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return rs, func() { _ = rs.Close(); _ = rdb.Close() }, nil
}

// redisOptions are the store's options: failures go to -failure-mode, and
// one pipeline is in flight per node (redisstore's default is 4), so that
// the decisions of the calls that arrive meanwhile share the next one: a
// round trip and a script run carry more decisions. Under peertest's
// side-by-side load (32 goroutines, two descriptors a call, Coalesce) it
// cut Redis' CPU per call from 24–34 µs to 16–26 µs on the 2-core build
// machine, where Redis shares the CPU with the service (README.md, Speed).
func redisOptions(timeout time.Duration) *redisstore.Options {
	return &redisstore.Options{Timeout: timeout, OnFailure: redisstore.FailError, Name: "rls", BatchPipelines: 1}
}
