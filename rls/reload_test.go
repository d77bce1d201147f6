package rls

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/memstore"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReload: a swapped file takes effect within a second and keeps the
// counters; a bad file keeps the configuration in force, and LastError and
// the log say why; a fixed file loads again.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write := func(yml string) {
		t.Helper()
		// Written beside and renamed, as a ConfigMap's symlink swap is atomic.
		tmp := filepath.Join(dir, ".tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(yml), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	limit := func(n int) string {
		return "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + string(rune('0'+n)) + "}\n"
	}
	write(limit(3))
	clk := newClock(t0)
	store, err := memstore.New(&memstore.Options{Now: clk.Now})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	svc, err := New(store, nil, &Options{Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	w, err := Watch(svc, dir, 20*time.Millisecond)
	require.NoError(t, err)
	defer w.Close()
	req := request("r", desc("k=v"))
	require.Equal(t, uint32(2), call(t, svc, req).Statuses[0].LimitRemaining)
	require.Equal(t, uint32(1), call(t, svc, req).Statuses[0].LimitRemaining)

	write(limit(5))
	require.Eventually(t, func() bool {
		return call(t, svc, request("r", withHits(desc("k=v"), 0))).Statuses[0].CurrentLimit.GetRequestsPerUnit() == 5
	}, time.Second, 5*time.Millisecond, "the new limit within 1s")
	// Two of the five were counted before the swap.
	require.Equal(t, uint32(2), call(t, svc, req).Statuses[0].LimitRemaining)

	write("domain: r\ndescriptors:\n  - key: k\n    rate_limt: {unit: hour}\n")
	require.Eventually(t, func() bool { return w.LastError() != nil }, time.Second, 5*time.Millisecond)
	require.ErrorContains(t, w.LastError(), "field rate_limt not found")
	require.Contains(t, logs.String(), "the previous one stays in force")
	require.Equal(t, uint32(1), call(t, svc, req).Statuses[0].LimitRemaining, "the old configuration still decides")
	require.Equal(t, uint64(1), svc.Stats().Snapshot()["ratelimit.service.config_load_error"])

	write(limit(6))
	require.Eventually(t, func() bool { return w.LastError() == nil }, time.Second, 5*time.Millisecond)
	require.Equal(t, uint32(1), call(t, svc, req).Statuses[0].LimitRemaining)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close twice")
}

// TestStats: envoyproxy/ratelimit's counters for a limit of 5 with
// NEAR_LIMIT_RATIO 0.8 (near from the 5th unit), through the Prometheus
// collector under the peer's mapped names.
func TestStats(t *testing.T) {
	const yml = `
domain: st
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: region
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	clk := newClock(t0)
	svc := newService(t, stores(t)[0].make(t, clk.Now), clk.Now, yml, nil)
	for range 7 {
		call(t, svc, request("st", desc("api=a")))
	}
	call(t, svc, request("st", withHits(desc("api=a"), 0)))
	call(t, svc, request("st", desc("region=eu")))
	require.Equal(t, Counts{TotalHits: 7, OverLimit: 2, NearLimit: 1, WithinLimit: 5}, svc.Stats().Counts("st.api"))
	require.Equal(t, Counts{TotalHits: 1, WithinLimit: 1}, svc.Stats().Counts("st.region_eu"))
	snap := svc.Stats().Snapshot()
	require.Equal(t, uint64(2), snap["ratelimit.service.rate_limit.st.api.over_limit"])
	require.Equal(t, uint64(1), snap["ratelimit.service.config_load_success"])

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(svc.Stats()))
	const want = `
# HELP ratelimit_service_rate_limit_over_limit Hits over a rate limit.
# TYPE ratelimit_service_rate_limit_over_limit counter
ratelimit_service_rate_limit_over_limit{domain="st",key1="api",key2=""} 2
ratelimit_service_rate_limit_over_limit{domain="st",key1="region_eu",key2=""} 0
# HELP ratelimit_service_rate_limit_total_hits Hits of a rate limit (envoyproxy/ratelimit's total_hits).
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="st",key1="api",key2=""} 7
ratelimit_service_rate_limit_total_hits{domain="st",key1="region_eu",key2=""} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_over_limit"))
}
