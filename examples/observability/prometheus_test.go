package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPrometheus is the check against a real Prometheus that CI runs
// (FLOODGATE_PROMETHEUS names the prometheus binary; it is skipped
// without). Everything runs on loopback and is stopped at the end, within
// 90 seconds:
//
//   - a redis-server of its own (FLOODGATE_REDIS_SERVER, or redis-server
//     from PATH) on a free port;
//   - the example service twice: on that Redis, failing open, and on
//     memstore;
//   - Prometheus scraping both every second, with the alert rules loaded;
//   - traffic: on each service, one request, scraped, then 30 requests of
//     one key on a burst of 20 (20 admitted, 10 denied); then the
//     redis-server is killed (SIGKILL) and 25 requests of another key are
//     admitted by the failure policy, which the store reports within its
//     interval (1s); then the store is closed, which reports what is left
//     (nothing more);
//   - once Prometheus has scraped both after that, its HTTP API must
//     report exactly that traffic: admitted, denied and fallbacks; the
//     fallback and breaker alerts must fire, the denied-ratio alert be
//     pending, and every rule evaluate;
//   - promtool check metrics on both expositions and promtool check rules
//     on the rules file must be clean.
func TestPrometheus(t *testing.T) {
	promBin := os.Getenv("FLOODGATE_PROMETHEUS")
	if promBin == "" {
		t.Skip("FLOODGATE_PROMETHEUS names no prometheus binary (Debian's prometheus package: /usr/bin/prometheus)")
	}
	promtool := filepath.Join(filepath.Dir(promBin), "promtool")
	if _, err := os.Stat(promtool); err != nil {
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Fatalf("no promtool beside %s or on PATH", promBin)
		}
	}
	redisBin := os.Getenv("FLOODGATE_REDIS_SERVER")
	if redisBin == "" {
		var err error
		if redisBin, err = exec.LookPath("redis-server"); err != nil {
			t.Fatal("no redis-server on PATH; set FLOODGATE_REDIS_SERVER")
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()

	redisCmd, redisAddr := startRedis(ctx, t, redisBin, dir)
	red, redURL := serve(t, config{redisAddr: redisAddr, alg: hourly(20)})
	mem, memURL := serve(t, config{alg: hourly(20)})
	redTarget, memTarget := strings.TrimPrefix(redURL, "http://"), strings.TrimPrefix(memURL, "http://")

	rules, err := filepath.Abs("../../fgprom/rules/floodgate.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(ctx, t, promBin, dir, rules, redTarget, memTarget)
	prom.waitFor(ctx, t, `count(up{job="floodgate"} == 1)`, func(v float64) bool { return v == 2 })
	t.Logf("redis-server, two services and Prometheus up in %v", time.Since(start).Round(time.Millisecond))

	// One request on each makes the limiter's series, its denials at 0
	// (and the store's, its failures at 0), and Prometheus scrapes them
	// before the traffic: rate() and increase() take a series' first
	// sample as their baseline, so a series born during the traffic would
	// hide it from the alerts, as it would in production.
	for _, u := range []string{redURL, memURL} {
		if got := send(t, u, "warm-up", 1); got[200] != 1 {
			t.Fatalf("a first request: statuses %v, want a 200", got)
		}
	}
	prom.waitFor(ctx, t, `count(floodgate_decisions_total{limiter="api",op="take",outcome="denied"} == 0)`, func(v float64) bool { return v == 2 })

	// The traffic.
	for _, s := range []struct{ name, url string }{{"redis", redURL}, {"memstore", memURL}} {
		if got := send(t, s.url, "alice", 30); got[200] != 20 || got[429] != 10 {
			t.Fatalf("%s: 30 requests on a burst of 20: statuses %v, want 20 200s and 10 429s", s.name, got)
		}
	}
	// The breaker opens when, over its last second or less, at least 10
	// calls failed and they were at least half of the calls: let the 30
	// answered calls leave its window, so that the outage opens it.
	time.Sleep(1100 * time.Millisecond)
	if err := redisCmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = redisCmd.Wait()
	outage := time.Now()
	if got := send(t, redURL, "bob", 25); got[200] != 25 {
		t.Fatalf("redis killed: 25 requests failing open: statuses %v, want 25 200s", got)
	}
	t.Logf("25 requests during the outage took %v", time.Since(outage).Round(time.Millisecond))
	// The store reports its failures once per node and interval (1s): they
	// arrive without Close, and Close, which reports what is left, must
	// not count them again.
	for value(t, red.registry, "floodgate_store_failures_total", map[string]string{"policy": "open"}) != 25 {
		if time.Since(outage) > 10*time.Second {
			t.Fatalf("after 10s, the adapter counts %v fallbacks, want 25",
				value(t, red.registry, "floodgate_store_failures_total", map[string]string{"policy": "open"}))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the 25 fallbacks were reported %v after the outage began", time.Since(outage).Round(time.Millisecond))
	if err := red.Close(); err != nil {
		t.Logf("closing the store: %v", err)
	}
	flushed := time.Now()
	if err := mem.Close(); err != nil {
		t.Fatal(err)
	}

	// A scrape of both that started after the flush.
	prom.waitFor(ctx, t, `min(timestamp(up{job="floodgate"}))`, func(v float64) bool {
		return v > float64(flushed.UnixNano())/1e9
	})
	t.Logf("traffic done and scraped after %v", time.Since(start).Round(time.Millisecond))

	decisions := func(instance, outcome string) string {
		return fmt.Sprintf(`sum(floodgate_decisions_total{instance=%q,limiter="api",op="take",outcome=%q})`, instance, outcome)
	}
	failures := func(policy string) string {
		return fmt.Sprintf(`sum(floodgate_store_failures_total{instance=%q,store="redis",policy=%q})`, redTarget, policy)
	}
	for _, c := range []struct {
		what string
		expr string
		want float64
	}{
		{"redis: admitted (21 by Redis, 25 failing open)", decisions(redTarget, "allowed"), 46},
		{"redis: denied", decisions(redTarget, "denied"), 10},
		{"redis: errors", decisions(redTarget, "error"), 0},
		{"redis: fallbacks (FailOpen)", failures("open"), 25},
		{"redis: failures under other policies", failures("closed") + " + " + failures("local") + " + " + failures("error"), 0},
		{"memstore: admitted", decisions(memTarget, "allowed"), 21},
		{"memstore: denied", decisions(memTarget, "denied"), 10},
		{"memstore: errors", decisions(memTarget, "error"), 0},
	} {
		got, err := prom.query(ctx, c.expr)
		if err != nil {
			t.Errorf("%s: %s: %v", c.what, c.expr, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: %s = %v, want %v", c.what, c.expr, got, c.want)
		} else {
			t.Logf("%s: %v", c.what, got)
		}
	}
	// What the store saw, which the traffic bounds without fixing it: at
	// least a round trip per decision made by Redis (a NOSCRIPT adds one),
	// failed calls, and a breaker that opened.
	for _, c := range []struct {
		what string
		expr string
		min  float64
	}{
		{"round trips answered", fmt.Sprintf(`sum(floodgate_store_calls_total{instance=%q,outcome="ok"})`, redTarget), 31},
		{"round trips failed", fmt.Sprintf(`sum(floodgate_store_calls_total{instance=%q,outcome!="ok"})`, redTarget), 1},
		{"breaker openings", fmt.Sprintf(`sum(floodgate_breaker_transitions_total{instance=%q,to="open"})`, redTarget), 1},
	} {
		got, err := prom.query(ctx, c.expr)
		if err != nil || got < c.min {
			t.Errorf("%s: %s = %v (%v), want at least %v", c.what, c.expr, got, err, c.min)
		} else {
			t.Logf("%s: %v", c.what, got)
		}
	}

	// The rules evaluate on the real series.
	// The outage fires its alerts; the denied ratio (10 of 56 and of 31)
	// is above 1%, pending for its 10 minutes.
	prom.waitForAlert(ctx, t, "FloodgateStoreFallbacks", map[string]string{"store": "redis", "policy": "open"}, "firing")
	prom.waitForAlert(ctx, t, "FloodgateBreakerOpen", map[string]string{"store": "redis"}, "firing")
	prom.waitForAlert(ctx, t, "FloodgateDeniedRatioHigh", map[string]string{"limiter": "api"}, "pending")
	prom.checkRulesHealthy(ctx, t)

	// promtool on what Prometheus scraped and on the rules.
	for _, target := range []string{redURL, memURL} {
		exposition := get(ctx, t, target+"/metrics")
		cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(exposition)
		if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on %s/metrics: %v\n%s", target, err, out)
		}
	}
	if out, err := exec.CommandContext(ctx, promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("the Prometheus check took %v", time.Since(start).Round(time.Millisecond))
}

// freePort returns a loopback address with a port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startRedis starts a redis-server on loopback, without persistence, and
// waits until it answers. It is killed at the end of the test if the test
// has not killed it.
func startRedis(ctx context.Context, t *testing.T, bin, dir string) (*exec.Cmd, string) {
	t.Helper()
	addr := freePort(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(ctx, bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	for {
		if err := client.Ping(ctx).Err(); err == nil {
			return cmd, addr
		} else if ctx.Err() != nil {
			t.Fatalf("redis-server on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serve runs the example service on a loopback port until the end of the
// test.
func serve(t *testing.T, cfg config) (*service, string) {
	t.Helper()
	svc, err := newService(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: svc.handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = svc.Close()
	})
	return svc, "http://" + l.Addr().String()
}

// promServer is a running Prometheus and its HTTP API.
type promServer struct{ url string }

// startPrometheus writes a configuration that scrapes targets every
// second and loads rules, and starts Prometheus on a loopback port with
// its storage in dir. It is stopped at the end of the test.
func startPrometheus(ctx context.Context, t *testing.T, bin, dir, rules string, targets ...string) *promServer {
	t.Helper()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: floodgate
    static_configs:
      - targets: [%s]
`, rules, strings.Join(quoted, ", "))
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cmd := exec.CommandContext(ctx, bin,
		"--config.file="+cfgFile,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second // then SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus' log:\n%s", logs.String())
		}
	})
	p := &promServer{url: "http://" + addr}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("prometheus on %s never became ready: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// api gets path of the HTTP API and decodes its data into v.
func (p *promServer) api(ctx context.Context, path string, params url.Values, v any) error {
	u := p.url + path
	if params != nil {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %d: %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// errNoSample is the answer of a query whose result is empty.
var errNoSample = errors.New("no sample")

// query evaluates expr now; its result must be one sample.
func (p *promServer) query(ctx context.Context, expr string) (float64, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	switch {
	case data.ResultType != "vector":
		return 0, fmt.Errorf("result of type %s", data.ResultType)
	case len(data.Result) == 0:
		return 0, errNoSample
	case len(data.Result) > 1:
		return 0, fmt.Errorf("%d samples, want 1", len(data.Result))
	}
	s, ok := data.Result[0].Value[1].(string)
	if !ok {
		return 0, fmt.Errorf("value %v", data.Result[0].Value)
	}
	return strconv.ParseFloat(s, 64)
}

// waitFor queries expr until ok accepts its value.
func (p *promServer) waitFor(ctx context.Context, t *testing.T, expr string, ok func(float64) bool) {
	t.Helper()
	for {
		v, err := p.query(ctx, expr)
		if err == nil && ok(v) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v (%v), and time is up", expr, v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitForAlert waits until the alert name with labels is in state
// (pending, firing).
func (p *promServer) waitForAlert(ctx context.Context, t *testing.T, name string, labels map[string]string, state string) {
	t.Helper()
	for {
		var data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		err := p.api(ctx, "/api/v1/alerts", nil, &data)
		for _, a := range data.Alerts {
			match := a.Labels["alertname"] == name && a.State == state
			for k, v := range labels {
				match = match && a.Labels[k] == v
			}
			if match {
				t.Logf("alert %s%v: %s", name, labels, state)
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("alert %s%v never %s (%v): %+v", name, labels, state, err, data.Alerts)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkRulesHealthy checks that every rule loaded and evaluates without
// an error.
func (p *promServer) checkRulesHealthy(ctx context.Context, t *testing.T) {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.api(ctx, "/api/v1/rules", nil, &data); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q: %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	if n == 0 {
		t.Error("Prometheus loaded no rule")
	}
	t.Logf("%d rules loaded and evaluated", n)
}

// get returns the body of a GET of u.
func get(ctx context.Context, t *testing.T, u string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// quiet discards go-redis' log of failed dials, which the outage makes
// by the hundred.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}
