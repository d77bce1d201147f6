package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// server is the Redis a test runs on: the one at REDIS_ADDR when set, else
// an embedded miniredis of the test's own.
type server struct {
	addr string
	mini *miniredis.Miniredis // nil on a real Redis
}

func newServer(t testing.TB) *server {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return &server{addr: addr}
	}
	m := miniredis.RunT(t)
	// TTLs run on miniredis' clock (the wall clock, or the time a test sets
	// with SetTime), as they do on Redis.
	m.ClockTTL(true)
	return &server{addr: m.Addr(), mini: m}
}

func (s *server) real() bool { return s.mini == nil }

// parallelOnMiniredis runs t in parallel with the package's other such
// tests when each test starts its own miniredis (REDIS_ADDR unset). They
// share no server, assert no latency, and wait on round trips to a
// miniredis that runs one command at a time, so one of them leaves a core
// idle: run by themselves, the eight that call it (two of them load tests,
// see loadTest) took 11.3 and 15.3 s one after another and 9.8 and 7.9 s
// two at a time. They call it first.
// On a real Redis they stay serial, as CI runs them: there they share one
// server, and TestScriptFlush flushes its scripts.
func parallelOnMiniredis(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		t.Parallel()
	}
}

// loadTest skips t, a load test, on the embedded miniredis unless
// FLOODGATE_LOAD is set. Such a test makes thousands of decisions from many
// goroutines; miniredis runs each script in an interpreter written in Go,
// one at a time, so there it costs seconds of go test ./... and proves
// less than on a real Redis, where CI runs it (REDIS_ADDR) at full size.
// .ci/run also runs the miniredis versions, with FLOODGATE_LOAD=1.
func loadTest(t *testing.T) {
	t.Helper()
	if os.Getenv("REDIS_ADDR") == "" && os.Getenv("FLOODGATE_LOAD") == "" {
		t.Skip("a load test: it runs on the Redis at REDIS_ADDR, or on miniredis with FLOODGATE_LOAD=1")
	}
}

// client returns a client the test closes at its end.
func (s *server) client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clock returns a Now function reading c that also moves miniredis' clock
// (TIME and TTLs) along, so that keys expire on the test's virtual time.
func (s *server) clock(c interface{ Now() time.Time }) func() time.Time {
	if s.mini == nil {
		return c.Now
	}
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t := c.Now()
		s.mini.SetTime(t)
		return t
	}
}

// testPrefix returns a key prefix unique to this run of the test, and
// deletes the keys under it when the test ends: tests never flush a server
// they did not start.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	p := "fgtest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { deleteKeys(t, c, p) })
	return p
}

// scanKeys returns the keys under prefix (on every master of a cluster).
func scanKeys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, n *redis.Client) error {
		it := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	switch v := c.(type) {
	case *redis.ClusterClient:
		require.NoError(t, v.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(t, scan(ctx, v))
	default:
		t.Fatalf("scanKeys: unsupported client %T", c)
	}
	return keys
}

func deleteKeys(t testing.TB, c redis.UniversalClient, prefix string) {
	t.Helper()
	for _, k := range scanKeys(t, c, prefix) {
		_ = c.Del(context.Background(), k).Err()
	}
}

// newStore returns a Store the test closes at its end, with a prefix of
// the test's own unless opts sets one.
func newStore(t testing.TB, c redis.UniversalClient, opts *Options) *Store {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = testPrefix(t, c)
	}
	if o.Timeout == 0 {
		// Tests on a shared, loaded machine measure correctness, not latency.
		o.Timeout = 5 * time.Second
	}
	s, err := New(c, &o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// t0 is a fixed instant with nanoseconds, for virtual clocks.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// kindOf returns the Kind of one of the five configurations.
func kindOf(alg floodgate.Algorithm) step.Kind {
	k, err := step.KindOf(alg)
	if err != nil {
		panic(err)
	}
	return k
}

// testName is the name of the tests' limiters and bindings: they share a
// key's state per kind, as limiters of one name do.
const testName = "test"

// testOpts names a test's limiter testName.
var testOpts = &floodgate.Options{Name: testName}

// applyOnce binds alg on st under testName and applies req for key: one
// step where a test has no Limiter. A key no step accepts is reported
// before an algorithm st refuses, as a Limiter's step would.
func applyOnce(ctx context.Context, st floodgate.Store, key string, alg floodgate.Algorithm, req floodgate.Request) (floodgate.Result, error) {
	return applyEach(ctx, st, key, alg, req, nil)
}

// applyEach is applyOnce with each for a Limits' per-limit Decisions.
func applyEach(ctx context.Context, st floodgate.Store, key string, alg floodgate.Algorithm, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b, err := st.Bind(testName, alg)
	if err != nil {
		if kerr := floodgate.CheckKey(key); kerr != nil {
			return floodgate.Result{}, kerr
		}
		return floodgate.Result{}, err
	}
	return b.Apply(ctx, key, req, each)
}
