package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/fgprom/dashboard"
)

// hourly admits burst requests per key, then one an hour: nothing refills
// during a test, so the counts are exact.
func hourly(burst int64) floodgate.Algorithm {
	return floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: burst}
}

// send makes n requests to /api/hello as apiKey and counts them by status.
func send(t *testing.T, base, apiKey string, n int) map[int]int {
	t.Helper()
	statuses := map[int]int{}
	for range n {
		req, err := http.NewRequest(http.MethodGet, base+"/api/hello", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	return statuses
}

func TestServiceCountsDecisions(t *testing.T) {
	svc, err := newService(config{alg: hourly(20)})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(svc.handler)
	defer srv.Close()

	if got := send(t, srv.URL, "alice", 25); got[200] != 20 || got[429] != 5 {
		t.Fatalf("25 requests on a burst of 20: statuses %v, want 20 200s and 5 429s", got)
	}
	if got := send(t, srv.URL, "bob", 3); got[200] != 3 {
		t.Fatalf("3 requests of another key: statuses %v, want 3 200s", got)
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d, want 200", path, resp.StatusCode)
		}
	}

	want := `
# HELP floodgate_decisions_total Decisions of a limiter on a store wrapped by observe.Store, by op (take, take_up_to, settle, refund, check) and outcome (allowed, denied, error).
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{limiter="api",op="take",outcome="allowed"} 23
floodgate_decisions_total{limiter="api",op="take",outcome="denied"} 5
floodgate_decisions_total{limiter="api",op="take",outcome="error"} 0
floodgate_decisions_total{limiter="search",op="take",outcome="allowed"} 0
floodgate_decisions_total{limiter="search",op="take",outcome="denied"} 0
floodgate_decisions_total{limiter="search",op="take",outcome="error"} 0
`
	if err := testutil.GatherAndCompare(svc.registry, strings.NewReader(want), "floodgate_decisions_total"); err != nil {
		t.Error(err)
	}
	// The Go and process collectors are there too, and the exposition
	// lints clean.
	problems, err := testutil.GatherAndLint(svc.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestPrintQueries(t *testing.T) {
	var b strings.Builder
	if err := printQueries(&b, "1m"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	panels, err := dashboard.Panels()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panels {
		if !strings.Contains(out, "# "+p.Title+"\n") {
			t.Errorf("no panel %q in the output", p.Title)
		}
	}
	body := out[strings.Index(out, "\n"):] // after the heading, which names the variable
	if strings.Contains(body, "$") {
		t.Errorf("a query keeps a dashboard variable:\n%s", out)
	}
	if !strings.Contains(out, `rate(floodgate_decisions_total{limiter=~".*",op="take"}[1m])`) {
		t.Errorf("the decision rate query is not expanded as expected:\n%s", out)
	}
}

// value returns the sum of the series of name in reg whose labels
// include labels.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := true
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == k && l.GetValue() == v
				}
				match = match && found
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func TestSearchLeases(t *testing.T) {
	svc, err := newService(config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.handler)
	defer srv.Close()
	for i := range 10 {
		resp, err := http.Get(srv.URL + "/api/search")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("search #%d: %d, want 200", i, resp.StatusCode)
		}
	}
	if err := svc.Close(); err != nil { // the pool gives its units back
		t.Fatal(err)
	}
	if v := value(t, svc.registry, "floodgate_decisions_total", map[string]string{"limiter": "search", "outcome": "allowed"}); v != 10 {
		t.Errorf("search decisions allowed = %v, want 10", v)
	}
	if v := value(t, svc.registry, "floodgate_lease_round_trips_total", map[string]string{"limiter": "search", "outcome": "granted"}); v < 1 {
		t.Errorf("lease round trips granted = %v, want at least 1", v)
	}
	leased := value(t, svc.registry, "floodgate_lease_units_total", map[string]string{"limiter": "search", "kind": "leased"})
	returned := value(t, svc.registry, "floodgate_lease_units_total", map[string]string{"limiter": "search", "kind": "returned"})
	if leased-returned != 10 {
		t.Errorf("leased %v units and returned %v, want 10 used", leased, returned)
	}
}

func TestExportLimits(t *testing.T) {
	svc, err := newService(config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(svc.handler)
	defer srv.Close()
	get := func(key, priority string, ms int) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/export?ms="+strconv.Itoa(ms), nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Priority", priority)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	// 8 exports of 4 keys hold 8 of the adaptive limit's 10 slots: a
	// third export of a key is refused by its in-flight limit (429), and
	// a sheddable one is shed (503), at 80% utilization.
	statuses := make(chan int, 8)
	for i := range 8 {
		go func() {
			statuses <- get("key-"+strconv.Itoa(i%4), adaptive.ClassDefault, 1000)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for value(t, svc.registry, "floodgate_inflight_requests", map[string]string{"limiter": "export"}) < 8 {
		if time.Now().After(deadline) {
			t.Fatal("the 8 exports never all held their slots")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The shed request first: the refused one ends as a success for AIMD,
	// which then raises the limit.
	if got := get("key-9", adaptive.ClassSheddable, 0); got != http.StatusServiceUnavailable {
		t.Errorf("a sheddable export at 80%%: %d, want 503", got)
	}
	if got := get("key-0", adaptive.ClassCritical, 0); got != http.StatusTooManyRequests {
		t.Errorf("a third export of key-0: %d, want 429", got)
	}
	for range 8 {
		if got := <-statuses; got != 200 {
			t.Errorf("an export: %d, want 200", got)
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"floodgate_inflight_acquires_total", map[string]string{"limiter": "export", "outcome": "allowed"}, 8},
		{"floodgate_inflight_acquires_total", map[string]string{"limiter": "export", "outcome": "denied"}, 1},
		{"floodgate_inflight_requests", map[string]string{"limiter": "export"}, 0},
		{"floodgate_shed_total", map[string]string{"shedder": "export", "class": "sheddable"}, 1},
	} {
		if v := value(t, svc.registry, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}
