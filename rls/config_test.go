package rls

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

func entries(pairs ...string) []Entry {
	var es []Entry
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		es = append(es, Entry{k, v})
	}
	return es
}

// TestLookup loads testdata/ (one file per shape envoyproxy/ratelimit's
// README documents, written for these tests) and checks which limit each
// descriptor gets and the stat key it counts under.
func TestLookup(t *testing.T) {
	cfg, err := LoadConfig("testdata")
	require.NoError(t, err)
	require.Equal(t, []string{"backoffice", "buckets", "db_qps", "depth", "detail", "edge_ip", "ext", "login", "metrics", "paths", "sms", "tiers", "units"}, cfg.Domains())
	tests := []struct {
		domain  string
		desc    []string
		rpu     uint32 // 0 with key "" means no limit
		key     string
		statKey string
	}{
		{"db_qps", []string{"table=orders"}, 200, "db_qps.table_orders", ""},
		{"db_qps", []string{"table=carts"}, 50, "db_qps.table_carts", ""},
		{"db_qps", []string{"table=users"}, 0, "", ""},
		{"sms", []string{"kind=promo", "phone=555"}, 3, "sms.kind_promo.phone", ""},
		{"sms", []string{"phone=555"}, 50, "sms.phone", ""},
		{"sms", []string{"kind=promo"}, 0, "", ""},
		{"sms", []string{"kind=other", "phone=555"}, 0, "", ""},
		{"edge_ip", []string{"client_ip=198.51.100.1"}, 20, "edge_ip.client_ip", ""},
		{"edge_ip", []string{"client_ip=192.0.2.66"}, 0, "edge_ip.client_ip_192.0.2.66", ""},
		{"depth", []string{"app=web"}, 7, "depth.app_web", ""},
		{"depth", []string{"app=web", "tenant=t"}, 0, "", ""},
		{"depth", []string{"app=api", "tenant=t"}, 9, "depth.app_api.tenant", ""},
		{"depth", []string{"app=api"}, 0, "", ""},
		{"backoffice", []string{"reports=r"}, 30, "backoffice.reports", ""},
		{"login", []string{"app=a", "account=canary"}, 1, "login.app.account_canary", ""},
		{"login", []string{"app=a", "account=bob"}, 4, "login.app.account", ""},
		{"tiers", []string{"plan=boost", "org=acme"}, 6, "tiers.plan_boost.org_acme", ""},
		{"detail", []string{"region=us"}, 40, "detail.region", "detail.region_us"},
		{"detail", []string{"region=eu"}, 80, "detail.region_eu", ""},
		{"paths", []string{"uri=/v2/users"}, 15, "paths.uri_/v2/*", ""},
		{"paths", []string{"uri=/v1/users"}, 30, "paths.uri_/*", ""},
		{"paths", []string{"uri=v1"}, 0, "", ""},
		{"metrics", []string{"svc=cart", "verb=getItems", "caller=c1"}, 12, "metrics.svc.verb_get*.caller", "metrics.svc_cart.verb_getItems.caller"},
		{"metrics", []string{"svc=cart", "verb=put", "caller=c1"}, 0, "", ""},
		{"buckets", []string{"object=img/a.png"}, 5, "buckets.object_img/*", ""},
		{"buckets", []string{"object=doc/a.txt"}, 5, "buckets.object_doc/*", ""},
		{"buckets", []string{"prefix=tmp/x", "op=put"}, 8, "buckets.prefix_tmp/*.op", ""},
		{"units", []string{"mo=1"}, 1, "units.mo", ""},
		{"nodomain", []string{"a=b"}, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.domain+":"+strings.Join(tt.desc, ","), func(t *testing.T) {
			l, statKey := cfg.Lookup(tt.domain, entries(tt.desc...)...)
			if tt.key == "" {
				require.Nil(t, l)
				return
			}
			require.NotNil(t, l)
			require.Equal(t, tt.rpu, l.RequestsPerUnit)
			require.Equal(t, tt.key, l.FullKey)
			want := tt.statKey
			if want == "" {
				want = tt.key
			}
			require.Equal(t, want, statKey)
		})
	}
	// Unlimited and named limits.
	l, _ := cfg.Lookup("backoffice", Entry{"sso", "x"})
	require.True(t, l.Unlimited)
	l, _ = cfg.Lookup("tiers", entries("plan=basic", "org=acme")...)
	require.Equal(t, "acme_basic", l.Name)
	l, _ = cfg.Lookup("tiers", entries("plan=boost", "org=acme")...)
	require.Equal(t, []string{"acme_basic"}, l.Replaces)
	l, _ = cfg.Lookup("units", Entry{"q", "x"})
	require.True(t, l.QuotaMode)
}

// TestUnits: every unit maps to envoyproxy/ratelimit's number of seconds
// (MONTH is 30 days), and the extensions build the algorithms they name.
func TestUnits(t *testing.T) {
	cfg, err := LoadConfig("testdata")
	require.NoError(t, err)
	day := 24 * time.Hour
	for k, w := range map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour, "d": day, "w": 7 * day, "mo": 30 * day} {
		l, _ := cfg.Lookup("units", Entry{k, "x"})
		require.Equal(t, w, l.Window, k)
		require.Equal(t, floodgate.FixedWindow{Limit: 1, Window: w}, l.alg, k)
	}
	for k, alg := range map[string]floodgate.Algorithm{
		"tb":   floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 20},
		"sw":   floodgate.SlidingWindow{Limit: 100, Window: time.Minute},
		"sl":   floodgate.SlidingLog{Limit: 5, Window: time.Minute},
		"fw":   floodgate.FixedWindow{Limit: 5, Window: time.Minute},
		"w90":  floodgate.FixedWindow{Limit: 5, Window: 90 * time.Second},
		"sw60": floodgate.SlidingWindow{Limit: 100, Window: time.Minute, SubWindows: 60},
		"year": floodgate.SlidingWindow{Limit: 1_000_000, Window: 365 * 24 * time.Hour, SubWindows: 60},
	} {
		l, _ := cfg.Lookup("ext", Entry{k, "x"})
		require.Equal(t, alg, l.alg, k)
	}
	l, _ := cfg.Lookup("ext", Entry{"w90", "x"})
	require.Equal(t, pb.RateLimitResponse_RateLimit_UNKNOWN, l.Unit)
}

// TestBadConfigs: what envoyproxy/ratelimit refuses is refused, with its
// reason; so are unknown keys anywhere, and what floodgate cannot run.
func TestBadConfigs(t *testing.T) {
	tests := []struct{ name, yml, want string }{
		{"unknown top key", "domain: d\nlimits: []\n", "field limits not found"},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: k\n    rate: 1\n", "field rate not found"},
		{"unknown rate_limit key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, per: 2}\n", "field per not found"},
		{"unknown replaces key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}\n", "field nam not found"},
		{"empty domain", "descriptors: []\n", "empty domain"},
		{"empty document", "", "empty document"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "duplicate descriptor composite key 'd.k'"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "invalid rate limit unit ''"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "empty replaces entry"},
		{"self replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", "replaces should not contain name of same descriptor"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold can only be used with wildcard values"},
		{"negative rpu", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "cannot unmarshal"},
		{"year", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1}\n", "for YEAR (365 days, as envoyproxy/ratelimit counts it) use algorithm calendar"},
		{"sub_windows on a fixed window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, sub_windows: 10}\n", "sub_windows applies to algorithm sliding_window only"},
		{"sub_windows too many", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_window, sub_windows: 65}\n", "SubWindows must be between 0 and 64"},
		{"sub_windows huge", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_window, sub_windows: 4294967295}\n", "SubWindows must be between 0 and 64"},
		{"sub_windows not dividing", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 1s, requests_per_unit: 1, algorithm: sliding_window, sub_windows: 7}\n", "not 7 sub-windows of a whole number of microseconds"},
		{"sub_windows unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, sub_windows: 7}\n", "should not specify an algorithm, a burst or sub_windows when unlimited"},
		{"year of one sub-window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: sliding_window, sub_windows: 1}\n", "use algorithm calendar"},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n", "unknown algorithm 'gcra'"},
		{"burst without token bucket", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", "burst applies to algorithm token_bucket only"},
		{"bad window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: soon, requests_per_unit: 1}\n", "invalid window 'soon'"},
		{"two documents", "domain: d\n---\ndomain: e\n", "one YAML document per file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(File{Name: "bad.yaml", Data: []byte(tt.yml)})
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrConfig), "%v does not match ErrConfig", err)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "bad.yaml")
		})
	}
	_, err := ParseConfig(File{Name: "a.yaml", Data: []byte("domain: d\n")}, File{Name: "b.yaml", Data: []byte("domain: d\n")})
	require.ErrorContains(t, err, "duplicate domain 'd'")
}
