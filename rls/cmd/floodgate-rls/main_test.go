package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const cfg427 = `
domain: shop
descriptors:
  - key: route_group
    value: api
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value: special
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the command with args and env, and returns a client
// connected to it. The server stops when the test ends.
func start(t *testing.T, args []string, env map[string]string) pb.RateLimitServiceClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		errc <- run(ctx, args, func(k string) string { return env[k] }, logs, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		cancel()
		t.Fatalf("run: %v\n%s", err, logs)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		require.NoError(t, <-errc)
	})
	hc := healthpb.NewHealthClient(conn)
	h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: pb.RateLimitService_ServiceDesc.ServiceName})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
	return pb.NewRateLimitServiceClient(conn)
}

func writeConfig(t *testing.T, dir, name, yml string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(yml), 0o644))
}

func desc(k, v string) *rlpb.RateLimitDescriptor {
	return &rlpb.RateLimitDescriptor{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
}

// TestServeMemory runs the #427 scenario over gRPC on loopback, with the
// configuration found through envoyproxy/ratelimit's RUNTIME_* variables.
func TestServeMemory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "rl", "config")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	writeConfig(t, dir, "shop.yaml", cfg427)
	c := start(t, []string{"-grpc-addr", "127.0.0.1:0"}, map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl"})
	req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlpb.RateLimitDescriptor{desc("route_group", "api"), desc("route", "special")}}
	var codes []pb.RateLimitResponse_Code
	for range 5 {
		r, err := c.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
		codes = append(codes, r.OverallCode)
	}
	ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	require.Equal(t, []pb.RateLimitResponse_Code{ok, ok, ok, over, over}, codes)
	r, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlpb.RateLimitDescriptor{desc("route_group", "api")}})
	require.NoError(t, err)
	require.Equal(t, uint32(6), r.Statuses[0].LimitRemaining, "the group's count after 3 admitted and one more")
}

// TestUnknownKeyRefused: a configuration with a key the format does not
// know keeps the service from starting, and says which.
func TestUnknownKeyRefused(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	writeConfig(t, filepath.Dir(f), "bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second, requests_per_unit: 1}\n")
	err := run(context.Background(), []string{"-config", f, "-grpc-addr", "127.0.0.1:0"}, func(string) string { return "" }, &syncBuffer{}, nil)
	require.ErrorContains(t, err, "rate_limits")
}

// TestFailOpenRedisKilled starts a redis-server of its own, serves on it,
// kills it, and checks that every reply after the kill comes within 15ms,
// admitting (fail-open), while the store's calls fail. The machine is
// shared: a round whose slow replies come from the host (other test
// binaries holding both cores) is run again, up to five rounds; a service
// that waits for a dead Redis is slow in every round. Under the race
// detector, whose instrumentation slows every call several times, the
// bound is 45ms.
func TestFailOpenRedisKilled(t *testing.T) { testFailOpen(t, syscall.SIGKILL) }

// TestFailOpenRedisStopped is TestFailOpenRedisKilled with the server
// stopped (SIGSTOP) instead: its connections stay open and nothing
// answers, so the calls end at the store budget of the call.
func TestFailOpenRedisStopped(t *testing.T) { testFailOpen(t, syscall.SIGSTOP) }

func testFailOpen(t *testing.T, sig syscall.Signal) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found")
	}
	var rounds []string
	for round := range 5 {
		slow, worst := failOpenRound(t, bin, sig)
		t.Logf("round %d: 400 calls after %v, the slowest took %v", round, sig, worst)
		if len(slow) == 0 {
			return
		}
		rounds = append(rounds, fmt.Sprintf("round %d:\n%s", round, strings.Join(slow, "\n")))
	}
	t.Fatalf("replies after %v over the bound or not admitted, in every round:\n%s", sig, strings.Join(rounds, "\n"))
}

// redisServer starts a redis-server of the test's own, ended at the
// end of the test (or by stop), and returns its address.
func redisServer(t *testing.T, bin string) (addr string, cmd *exec.Cmd, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := lis.Addr().(*net.TCPAddr).Port
	require.NoError(t, lis.Close())
	cmd = exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, cmd.Start())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			break
		}
		require.True(t, time.Now().Before(deadline), "redis-server did not start")
		time.Sleep(10 * time.Millisecond)
	}
	return addr, cmd, stop
}

func failOpenRound(t *testing.T, bin string, sig syscall.Signal) (slow []string, worst time.Duration) {
	addr, cmd, stop := redisServer(t, bin)
	defer stop()
	dir := t.TempDir()
	writeConfig(t, dir, "shop.yaml", cfg427)
	c := start(t, []string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-backend", "redis", "-redis-url", addr}, nil)
	req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlpb.RateLimitDescriptor{desc("route_group", "api"), desc("route", "special")}}
	// Warm the connections, then kill Redis.
	for range 3 {
		_, err := c.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
	}
	require.NoError(t, cmd.Process.Signal(sig))

	bound := 15 * time.Millisecond
	if raceEnabled {
		bound *= 3
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := range 200 {
				begin := time.Now()
				r, err := c.ShouldRateLimit(context.Background(), req)
				took := time.Since(begin)
				mu.Lock()
				worst = max(worst, took)
				if err != nil || r.OverallCode != pb.RateLimitResponse_OK || took > bound {
					slow = append(slow, fmt.Sprintf("goroutine %d call %d: %v in %v (err %v)", g, i, r.GetOverallCode(), took, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return slow, worst
}

// TestRedisReadyAtStart: floodgate-rls dials Redis and loads its scripts
// before it serves, so that the first calls pay for neither (they would
// take longer than -timeout and be decided by -failure-mode).
func TestRedisReadyAtStart(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found")
	}
	addr, _, _ := redisServer(t, bin)
	dir := t.TempDir()
	writeConfig(t, dir, "shop.yaml", cfg427)
	start(t, []string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-backend", "redis", "-redis-url", addr}, nil)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	require.Contains(t, info, "cmdstat_script|load:", "no script loaded before the first call:\n%s", info)
	require.NotContains(t, info, "cmdstat_evalsha", "a decision made before any call:\n%s", info)
}

// TestRedisDownAtStart: a Redis that does not answer at start does not
// keep floodgate-rls from serving; it decides by -failure-mode (open).
func TestRedisDownAtStart(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	dir := t.TempDir()
	writeConfig(t, dir, "shop.yaml", cfg427)
	c := start(t, []string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-backend", "redis", "-redis-url", addr}, nil)
	r, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlpb.RateLimitDescriptor{desc("route", "special")}})
	require.NoError(t, err)
	require.Equal(t, pb.RateLimitResponse_OK, r.OverallCode)
}
