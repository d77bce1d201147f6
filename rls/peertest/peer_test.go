package peertest

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/provider"
	peerredis "github.com/envoyproxy/ratelimit/src/redis"
	peersvc "github.com/envoyproxy/ratelimit/src/service"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/rls"

	"github.com/envoyproxy/ratelimit/src/server"
)

// clock is the virtual clock both services read.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// UnixNow is the peer's utils.TimeSource.
func (c *clock) UnixNow() int64 { return c.Now().Unix() }

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// staticProvider hands the peer one configuration.
type staticProvider struct {
	ch chan provider.ConfigUpdateEvent
}

func (p *staticProvider) ConfigUpdateEvent() <-chan provider.ConfigUpdateEvent { return p.ch }
func (p *staticProvider) Stop()                                                {}

type event struct{ cfg config.RateLimitConfig }

func (e event) GetConfig() (config.RateLimitConfig, any) { return e.cfg, nil }

// services returns the peer (on REDIS_ADDR under a key prefix of its own)
// and floodgate's service on memstore and on the same Redis, all on clk.
func services(t *testing.T, yml string, clk *clock) (peer pb.RateLimitServiceServer, ours map[string]pb.RateLimitServiceServer) {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		t.Skip("envoyproxy/ratelimit has no in-memory backend: set REDIS_ADDR to run it as the reference")
	}
	prefix := fmt.Sprintf("peer%d:", time.Now().UnixNano())
	s := settings.NewSettings()
	store := gostats.NewStore(gostats.NewNullSink(), false)
	sm := stats.NewStatManager(store, s)
	client := peerredis.NewClientImpl(store.Scope("redis"), false, "", "tcp", "single", addr, 4, 0, 0, nil, false, nil, time.Second, "WAIT", "")
	t.Cleanup(func() { _ = client.Close() })
	cache := peerredis.NewFixedRateLimitCacheImpl(client, nil, clk, rand.New(rand.NewSource(1)), 0, nil, 0.8, prefix, sm, false)
	root := config.ConfigFileContentToYaml("test.yaml", yml)
	cfg := config.NewRateLimitConfigImpl([]config.RateLimitConfigToLoad{{Name: "test.yaml", ConfigYaml: root}}, sm, false)
	p := &staticProvider{ch: make(chan provider.ConfigUpdateEvent, 1)}
	p.ch <- event{cfg}
	hc := server.NewHealthChecker(health.NewServer(), "ratelimit", false)
	peer = peersvc.NewService(cache, p, sm, hc, clk, false, false, false)

	ourCfg, err := rls.ParseConfig(rls.File{Name: "test.yaml", Data: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(&memstore.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rs, err := redisstore.New(rdb, &redisstore.Options{Prefix: "fg" + prefix, Now: clk.Now, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	ours = map[string]pb.RateLimitServiceServer{}
	for name, st := range map[string]floodgate.Store{"memstore": ms, "redis": rs} {
		// On Redis as floodgate-rls serves it, with Coalesce.
		svc, err := rls.New(st, ourCfg, &rls.Options{Now: clk.Now, Timeout: 2 * time.Second, Coalesce: name == "redis"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Close() })
		ours[name] = svc
	}
	return peer, ours
}

// step is one call of a scenario: advance the clock by Advance, then send
// the descriptors ("k=v,k2=v2" each, "#n" for hits_addend n).
type step struct {
	Advance time.Duration
	Descs   []string
}

func parseDesc(s string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	s, hits, ok := strings.Cut(s, "#")
	if ok {
		var n uint64
		fmt.Sscan(hits, &n)
		d.HitsAddend = wrapperspb.UInt64(n)
	}
	for _, p := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// answer is what the comparison looks at: overall_code, and per descriptor
// code, limit_remaining and duration_until_reset.
func answer(r *pb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.GetOverallCode().String())
	for _, s := range r.GetStatuses() {
		fmt.Fprintf(&b, " [%s r=%d t=%ds]", s.GetCode(), s.GetLimitRemaining(), s.GetDurationUntilReset().GetSeconds())
	}
	return b.String()
}

func play(t *testing.T, svc pb.RateLimitServiceServer, clk *clock, domain string, steps []step) []string {
	t.Helper()
	var out []string
	for _, st := range steps {
		clk.Add(st.Advance)
		req := &pb.RateLimitRequest{Domain: domain}
		for _, d := range st.Descs {
			req.Descriptors = append(req.Descriptors, parseDesc(d))
		}
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit(%v): %v", st.Descs, err)
		}
		out = append(out, fmt.Sprintf("%v +%v: %s", st.Descs, st.Advance, answer(resp)))
	}
	return out
}

// start is 10.5 seconds into a minute; each scenario starts a fresh clock
// there.
var start = time.Date(2026, 3, 2, 10, 0, 10, 500_000_000, time.UTC)

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
		if i > 0 {
			out[i].Advance = 0
		}
	}
	return out
}

const configAll = `
domain: parity
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: plan
    value: free
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, name: base}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces:
        - name: base
`

// TestSameAnswersAsPeer plays scenarios on the peer and on floodgate's
// service (memstore and Redis) and requires the same overall_code,
// codes, limit_remaining and duration_until_reset at every step.
func TestSameAnswersAsPeer(t *testing.T) {
	scenarios := map[string][]step{
		"minute window through its end": append(append(repeat(5, step{0, []string{"user=alice"}}),
			step{49 * time.Second, []string{"user=alice"}}), // 59.5s
			step{time.Second, []string{"user=alice"}}, step{0, []string{"user=bob"}}),
		"second window":           append(repeat(3, step{0, []string{"ip=10.0.0.1"}}), step{time.Second, []string{"ip=10.0.0.1"}}, step{0, []string{"ip=10.0.0.2"}}),
		"wildcard":                repeat(6, step{time.Minute, []string{"path=/api/v1"}}),
		"day week month":          append(repeat(3, step{0, []string{"plan=free", "week=w", "month=m"}}), step{20 * 24 * time.Hour, []string{"plan=free", "week=w", "month=m"}}),
		"zero and unlimited":      repeat(2, step{0, []string{"zero=z", "free=f", "nolimit=n"}}),
		"shadow mode":             repeat(3, step{0, []string{"shadow=s"}}),
		"nested":                  append(repeat(3, step{0, []string{"tenant=t,user=u"}}), step{0, []string{"tenant=t"}}, step{0, []string{"tenant=t,user=u,extra=x"}}),
		"replaces":                repeat(3, step{0, []string{"base=b", "premium=b"}}),
		"hits_addend 0 and 2":     {{0, []string{"user=h#0"}}, {0, []string{"user=h#2"}}, {0, []string{"user=h#0"}}, {0, []string{"user=h#1"}}, {0, []string{"user=h#0"}}, {0, []string{"user=h"}}},
		"hits above what is left": {{0, []string{"user=x#2"}}, {0, []string{"user=x#2"}}, {0, []string{"user=y#5"}}},
		"two descriptors within":  repeat(2, step{0, []string{"user=two", "plan=free"}}),
	}
	for name, steps := range scenarios {
		t.Run(name, func(t *testing.T) {
			clk := &clock{t: start}
			peer, ours := services(t, configAll, clk)
			want := play(t, peer, clk, "parity", steps)
			t.Logf("envoyproxy/ratelimit:\n%s", strings.Join(want, "\n"))
			for store := range ours {
				// A fresh service (and clock) for each store.
				clk := &clock{t: start}
				_, fresh := services(t, configAll, clk)
				got := play(t, fresh[store], clk, "parity", steps)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("%s: floodgate's answers differ from envoyproxy/ratelimit's:\n got:\n%s\nwant:\n%s", store, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}

// TestIntendedDifferences plays the cases where floodgate answers
// otherwise on purpose, and pins both answers: a denial spends nothing.
func TestIntendedDifferences(t *testing.T) {
	const yml = `
domain: diff
descriptors:
  - key: route_group
    value: api
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value: special
    rate_limit: {unit: minute, requests_per_unit: 3}
`
	// envoyproxy/ratelimit #427: the group keeps 7 with floodgate, 5 with
	// the peer, which counts the denied calls against it.
	steps := append(repeat(5, step{0, []string{"route_group=api", "route=special"}}), step{0, []string{"route_group=api#0"}})
	clk := &clock{t: start}
	peer, _ := services(t, yml, clk)
	peerGot := play(t, peer, clk, "diff", steps)
	clk = &clock{t: start}
	_, ours := services(t, yml, clk)
	ourGot := play(t, ours["memstore"], clk, "diff", steps)
	if !strings.HasSuffix(peerGot[5], "OK [OK r=5 t=50s]") {
		t.Errorf("peer, the group after 5 calls: %s, want r=5", peerGot[5])
	}
	if !strings.HasSuffix(ourGot[5], "OK [OK r=7 t=50s]") {
		t.Errorf("floodgate, the group after 5 calls: %s, want r=7", ourGot[5])
	}
	// The three admitted calls answer alike; the denied ones differ only
	// in the group's remaining count.
	if strings.Join(peerGot[:3], "\n") != strings.Join(ourGot[:3], "\n") {
		t.Errorf("the admitted calls' answers differ:\n got:\n%s\nwant:\n%s", strings.Join(ourGot[:3], "\n"), strings.Join(peerGot[:3], "\n"))
	}

	// A denied hits_addend of 2 spends nothing with floodgate: one unit
	// still passes, where the peer, having counted 4 of 3, denies.
	steps = []step{{0, []string{"route=special#2"}}, {0, []string{"route=special#2"}}, {0, []string{"route=special#1"}}}
	clk = &clock{t: start}
	peer, _ = services(t, yml, clk)
	peerGot = play(t, peer, clk, "diff", steps)
	clk = &clock{t: start}
	_, ours = services(t, yml, clk)
	ourGot = play(t, ours["redis"], clk, "diff", steps)
	if !strings.HasSuffix(peerGot[2], "OVER_LIMIT [OVER_LIMIT r=0 t=50s]") || !strings.HasSuffix(ourGot[2], "OK [OK r=0 t=50s]") {
		t.Errorf("after a denied hits_addend 2: peer %q, floodgate %q; want OVER_LIMIT and OK", peerGot[2], ourGot[2])
	}
}
