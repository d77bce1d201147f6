package peertest

import (
	"cmp"
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/provider"
	peerredis "github.com/envoyproxy/ratelimit/src/redis"
	"github.com/envoyproxy/ratelimit/src/server"
	peersvc "github.com/envoyproxy/ratelimit/src/service"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"

	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/rls"
)

type wallClock struct{}

func (wallClock) UnixNow() int64 { return time.Now().Unix() }

const benchConfig = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1000000}
`

// handlerTimes records how long a service's handler took for each call,
// from a gRPC interceptor: a call's time inside the service, apart from
// gRPC's transport and the load's client.
type handlerTimes struct {
	mu    sync.Mutex
	times []time.Duration
}

func (h *handlerTimes) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	d := time.Since(start)
	h.mu.Lock()
	h.times = append(h.times, d)
	h.mu.Unlock()
	return resp, err
}

// median returns the median of the times recorded since the last call,
// and forgets them.
func (h *handlerTimes) median() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.times) == 0 {
		return 0
	}
	slices.Sort(h.times)
	m := h.times[len(h.times)/2]
	h.times = h.times[:0]
	return m
}

// serve runs svc on a loopback gRPC server with opts and returns a client
// of it; h records the handler's times.
func serve(t *testing.T, svc pb.RateLimitServiceServer, h *handlerTimes, opts ...grpc.ServerOption) pb.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(slices.Clone(opts), grpc.UnaryInterceptor(h.intercept))...)
	pb.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); srv.Stop() })
	return pb.NewRateLimitServiceClient(conn)
}

// load sends requests of two descriptors over 1,000 users from workers
// goroutines for d, and returns calls per second and the latencies' p50
// and p99. With rate above 0 the calls are paced: worker w sends its i-th
// call at (i·workers + w)/rate seconds from the start, or at once when it
// is late, and a call's latency runs from the time it was due, so that a
// call held back by a slow one before it counts its wait (no coordinated
// omission).
func load(t *testing.T, c pb.RateLimitServiceClient, workers int, d time.Duration, rate float64) (perSec float64, p50, p99 time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	begin := time.Now()
	for w := range workers {
		wg.Go(func() {
			lat := make([]time.Duration, 0, 1<<16)
			for i := 0; time.Now().Before(end); i++ {
				user := strconv.Itoa((w*7919 + i) % 1000)
				req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{
					{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "user", Value: user}}},
					{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "route", Value: "/api"}}},
				}}
				s := time.Now()
				if rate > 0 {
					due := begin.Add(time.Duration(float64(i*workers+w) / rate * float64(time.Second)))
					if wait := time.Until(due); wait > 0 {
						time.Sleep(wait)
					}
					s = due
				}
				r, err := c.ShouldRateLimit(context.Background(), req)
				lat = append(lat, time.Since(s))
				if err != nil || r.OverallCode != pb.RateLimitResponse_OK {
					t.Errorf("call: %v %v", r.GetOverallCode(), err)
					return
				}
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	slices.Sort(all)
	if len(all) == 0 {
		t.Fatal("no calls")
	}
	return float64(len(all)) / elapsed.Seconds(), all[len(all)/2], all[len(all)*99/100]
}

// okService answers OK to every call without deciding anything: the
// side-by-side run's floor.
type okService struct {
	pb.UnimplementedRateLimitServiceServer
}

func (okService) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

// row is a service the side-by-side benchmark measures.
type row struct {
	name string
	svc  func() pb.RateLimitServiceServer
	// opts are the gRPC server's options, as each binary runs: for
	// floodgate-rls its default -grpc-workers (cmd/floodgate-rls); the
	// peer's binary adds keepalive and OpenTelemetry interceptors, which
	// cost it CPU, and runs here without them.
	opts []grpc.ServerOption
}

// TestSideBySide measures ShouldRateLimit calls per second and their
// latency over gRPC on loopback, for floodgate's service on memstore and
// on Redis and for envoyproxy/ratelimit on the same Redis, in one run,
// at 32 and at 128 calls at a time. It runs only with FLOODGATE_RLS_BENCH=1
// (and REDIS_ADDR for the Redis rows):
//
//	FLOODGATE_RLS_BENCH=1 REDIS_ADDR=127.0.0.1:6379 go test -run SideBySide -v .
//
// FLOODGATE_RLS_BENCH_ROWS keeps the rows whose name contains it,
// FLOODGATE_RLS_BENCH_WORKERS runs one load, FLOODGATE_RLS_BENCH_TIME sets
// a round's length (3s), FLOODGATE_RLS_BENCH_ROUNDS the rounds (5; an
// even number is made odd, so that the median is a round's),
// FLOODGATE_RLS_BENCH_RATE paces the calls at that many a second (see
// load). The row "grpc alone (no decision)" is the floor: a service that
// answers OK at once, on the same gRPC server options.
func TestSideBySide(t *testing.T) {
	if os.Getenv("FLOODGATE_RLS_BENCH") == "" {
		t.Skip("set FLOODGATE_RLS_BENCH=1 to run the side-by-side benchmark")
	}
	logrus.SetLevel(logrus.ErrorLevel)
	dur := 3 * time.Second
	if v, err := time.ParseDuration(os.Getenv("FLOODGATE_RLS_BENCH_TIME")); err == nil {
		dur = v
	}
	// 32 calls at a time leave part of the 2-core build machine idle, so
	// latency decides them; 128 keep its CPU busy, so the CPU each call
	// costs decides them. FLOODGATE_RLS_BENCH_WORKERS runs one load.
	loads := []int{32, 128}
	// FLOODGATE_RLS_BENCH_RATE paces the calls at that many a second in
	// all (see load): the latency of a service at a given rate rather
	// than at its most.
	rate := 0.0
	if v, err := strconv.ParseFloat(os.Getenv("FLOODGATE_RLS_BENCH_RATE"), 64); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.Atoi(os.Getenv("FLOODGATE_RLS_BENCH_WORKERS")); err == nil && v > 0 {
		loads = []int{v}
	}
	cfg, err := rls.ParseConfig(rls.File{Name: "bench.yaml", Data: []byte(benchConfig)})
	if err != nil {
		t.Fatal(err)
	}
	ours := []grpc.ServerOption{grpc.NumStreamWorkers(256)}
	rows := []row{{"floodgate memstore", func() pb.RateLimitServiceServer {
		ms, err := memstore.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := rls.New(ms, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}, ours}}
	// The floor: gRPC on loopback with a handler that decides nothing,
	// on the same server options; its latency is gRPC's and the host's.
	rows = append(rows, row{"grpc alone (no decision)", func() pb.RateLimitServiceServer { return okService{} }, ours})
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		prefix := fmt.Sprintf("bench%d:", time.Now().UnixNano())
		redisRow := func(parallel, joint bool) func() pb.RateLimitServiceServer {
			return func() pb.RateLimitServiceServer {
				rdb := redis.NewClient(&redis.Options{Addr: addr})
				t.Cleanup(func() { _ = rdb.Close() })
				// The options floodgate-rls gives the store (its
				// redisOptions, with its default -redis-timeout), under a
				// prefix of the bench's own.
				rs, err := redisstore.New(rdb, &redisstore.Options{Prefix: "fg" + prefix, Timeout: 10 * time.Millisecond, OnFailure: redisstore.FailError, Name: "rls", BatchPipelines: 1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = rs.Close() })
				// As floodgate-rls starts: connected, its scripts loaded.
				if err := rs.Ping(context.Background()); err != nil {
					t.Fatal(err)
				}
				// As floodgate-rls serves Redis: with Coalesce.
				svc, err := rls.New(rs, cfg, &rls.Options{Parallel: parallel, Joint: joint, Coalesce: true})
				if err != nil {
					t.Fatal(err)
				}
				return svc
			}
		}
		// floodgate-rls decides the descriptors at once on Redis by default
		// (-descriptors=auto).
		rows = append(rows, row{"floodgate redis parallel", redisRow(true, false), ours}, row{"floodgate redis in order", redisRow(false, false), ours},
			row{"floodgate redis joint", redisRow(true, true), ours}, row{"envoyproxy/ratelimit redis", func() pb.RateLimitServiceServer {
				s := settings.NewSettings()
				store := gostats.NewStore(gostats.NewNullSink(), false)
				sm := stats.NewStatManager(store, s)
				client := peerredis.NewClientImpl(store.Scope("redis"), false, "", "tcp", "single", addr, s.RedisPoolSize, 0, 0, nil, false, nil, time.Second, "WAIT", "")
				t.Cleanup(func() { _ = client.Close() })
				cache := peerredis.NewFixedRateLimitCacheImpl(client, nil, wallClock{}, rand.New(rand.NewSource(1)), 0, nil, 0.8, "peer"+prefix, sm, false)
				root := config.ConfigFileContentToYaml("bench.yaml", benchConfig)
				pc := config.NewRateLimitConfigImpl([]config.RateLimitConfigToLoad{{Name: "bench.yaml", ConfigYaml: root}}, sm, false)
				p := &staticProvider{ch: make(chan provider.ConfigUpdateEvent, 1)}
				p.ch <- event{pc}
				return peersvc.NewService(cache, p, sm, server.NewHealthChecker(health.NewServer(), "ratelimit", false), wallClock{}, false, false, false)
			}, nil})
	}
	if only := os.Getenv("FLOODGATE_RLS_BENCH_ROWS"); only != "" {
		rows = slices.DeleteFunc(rows, func(r row) bool { return !strings.Contains(r.name, only) })
	}
	clients := make([]pb.RateLimitServiceClient, len(rows))
	handlers := make([]*handlerTimes, len(rows))
	for i, r := range rows {
		handlers[i] = new(handlerTimes)
		clients[i] = serve(t, r.svc(), handlers[i], r.opts...)
	}
	peer := slices.IndexFunc(rows, func(r row) bool { return strings.HasPrefix(r.name, "envoyproxy") })
	for _, workers := range loads {
		compare(t, rows, clients, handlers, peer, workers, dur, rate)
	}
	// The host's own pauses, which bound what the latencies above can
	// show: a goroutine that only reads the clock, alone.
	gaps, longest := pauses(time.Second)
	t.Logf("host: a goroutine reading the clock for 1s alone saw %d pauses over 1ms, %d over 2ms, %d over 5ms; the longest %v",
		gaps[0], gaps[1], gaps[2], longest.Round(time.Microsecond))
}

// pauses reads the clock in a loop for d and counts the gaps between two
// reads longer than 1ms, 2ms and 5ms: the time the goroutine did not run,
// whatever took its CPU (another process, the hypervisor).
func pauses(d time.Duration) (gaps [3]int, longest time.Duration) {
	last := time.Now()
	end := last.Add(d)
	for last.Before(end) {
		now := time.Now()
		g := now.Sub(last)
		last = now
		longest = max(longest, g)
		for i, th := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond} {
			if g > th {
				gaps[i]++
			}
		}
	}
	return gaps, longest
}

// compare measures the rows' services under the load of workers
// goroutines. The rows take turns, 5 rounds (FLOODGATE_RLS_BENCH_ROUNDS)
// of them, so that the noise of a shared host falls on all of them alike;
// each reports its median round (with its handler's median time, from
// handlers) and, for a Redis row when the peer (rows[peer]) ran too, the
// median of its rounds' ratios to the peer's round of the same turn
// (not when the calls are paced: every row then runs at the rate).
func compare(t *testing.T, rows []row, clients []pb.RateLimitServiceClient, handlers []*handlerTimes, peer, workers int, dur time.Duration, rate float64) {
	t.Helper()
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("FLOODGATE_RLS_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v | 1 // odd: the median is a round's
	}
	for i := range rows {
		load(t, clients[i], workers, 500*time.Millisecond, rate) // warm-up
	}
	type result struct {
		perSec   float64
		p50, p99 time.Duration
		handler  time.Duration // the handler's median
	}
	results := make([][]result, len(rows))
	for range rounds {
		for i := range rows {
			handlers[i].median() // the calls before the round
			perSec, p50, p99 := load(t, clients[i], workers, dur, rate)
			results[i] = append(results[i], result{perSec, p50, p99, handlers[i].median()})
		}
	}
	for i, r := range rows {
		rs := results[i]
		ratio := ""
		if rate == 0 && peer >= 0 && i != peer && strings.Contains(r.name, "redis") {
			q := make([]float64, rounds)
			for k := range rounds {
				q[k] = rs[k].perSec / results[peer][k].perSec
			}
			slices.Sort(q)
			ratio = fmt.Sprintf("  %.2f× the peer (rounds %.2f..%.2f)", q[rounds/2], q[0], q[rounds-1])
		}
		byRate := slices.Clone(rs)
		slices.SortFunc(byRate, func(a, b result) int { return cmp.Compare(a.perSec, b.perSec) })
		m := byRate[len(byRate)/2]
		t.Logf("%3d goroutines  %-28s %8.0f calls/s  p50 %v  p99 %v  handler p50 %v%s  (median of %d rounds of %v; rounds: %.0f..%.0f calls/s; two descriptors a call)",
			workers, r.name, m.perSec, m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), m.handler.Round(time.Microsecond), ratio, rounds, dur, byRate[0].perSec, byRate[len(byRate)-1].perSec)
	}
}
