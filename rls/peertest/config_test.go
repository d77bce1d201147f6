package peertest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"

	"github.com/floodgate-go/floodgate/rls"
)

// lookups are descriptors to look up in every configuration of
// ../testdata: each is sent to the domain of every file.
var lookups = [][]string{
	{"table=orders"}, {"table=carts"}, {"table=users"},
	{"kind=promo", "phone=555"}, {"phone=555"}, {"kind=promo"}, {"kind=other", "phone=555"},
	{"client_ip=198.51.100.1"}, {"client_ip=192.0.2.66"},
	{"app=web"}, {"app=web", "tenant=t"}, {"app=api", "tenant=t"}, {"app=api"},
	{"sso=x"}, {"reports=r"},
	{"app=a", "account=canary"}, {"app=a", "account=bob"},
	{"plan=basic", "org=acme"}, {"plan=boost", "org=acme"}, {"plan=boost", "org=other"},
	{"region=us"}, {"region=eu"},
	{"uri=/v2/users"}, {"uri=/v1/users"}, {"uri=v1"},
	{"svc=cart", "verb=getItems", "caller=c1"}, {"svc=cart", "verb=put", "caller=c1"},
	{"object=img/a.png"}, {"object=doc/a.txt"}, {"prefix=tmp/x", "op=put"},
	{"s=1"}, {"m=1"}, {"h=1"}, {"d=1"}, {"w=1"}, {"mo=1"}, {"q=1"},
}

// TestSameLookupsAsPeer loads each configuration of ../testdata that the
// peer's format holds (extensions.yaml holds floodgate's extensions) into
// both services' loaders and requires, for every descriptor, the same
// limit: none, or the same requests_per_unit, unit, unlimited, shadow and
// quota mode, name, replaces, and the same stat key.
func TestSameLookupsAsPeer(t *testing.T) {
	files, err := filepath.Glob("../testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no configurations in ../testdata: %v", err)
	}
	sm := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.NewSettings())
	for _, f := range files {
		if filepath.Base(f) == "extensions.yaml" {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			root := config.ConfigFileContentToYaml(f, string(data))
			peer := config.NewRateLimitConfigImpl([]config.RateLimitConfigToLoad{{Name: f, ConfigYaml: root}}, sm, false)
			ours, err := rls.ParseConfig(rls.File{Name: f, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			for _, pairs := range lookups {
				d := &rlpb.RateLimitDescriptor{}
				var es []rls.Entry
				for _, p := range pairs {
					k, v, _ := strings.Cut(p, "=")
					d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
					es = append(es, rls.Entry{Key: k, Value: v})
				}
				want := peer.GetLimit(context.Background(), root.Domain, d)
				got, statKey := ours.Lookup(root.Domain, es...)
				switch {
				case want == nil && got == nil:
					continue
				case want == nil || got == nil:
					t.Errorf("%v: peer %v, floodgate %v", pairs, want, got)
					continue
				}
				if got.RequestsPerUnit != want.Limit.RequestsPerUnit || got.Unit != want.Limit.Unit ||
					got.Unlimited != want.Unlimited || got.ShadowMode != want.ShadowMode || got.QuotaMode != want.QuotaMode ||
					got.Name != want.Name || strings.Join(got.Replaces, ",") != strings.Join(want.Replaces, ",") {
					t.Errorf("%v: floodgate's limit %+v, peer's %+v", pairs, *got, *want)
				}
				if statKey != want.Stats.GetKey() {
					t.Errorf("%v: stat key %q, peer's %q", pairs, statKey, want.Stats.GetKey())
				}
			}
		})
	}
}

// TestSameRefusals: configurations the peer refuses (it panics with a
// RateLimitConfigError) are refused by floodgate too.
func TestSameRefusals(t *testing.T) {
	bad := []string{
		"domain: d\nlimits: []\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate: 1\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, per: 2}\n",
		"descriptors: []\n",
		"domain: d\ndescriptors:\n  - value: v\n",
		"domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
	}
	sm := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.NewSettings())
	for _, yml := range bad {
		peerRefused := func() (refused bool) {
			defer func() { refused = recover() != nil }()
			root := config.ConfigFileContentToYaml("bad.yaml", yml)
			config.NewRateLimitConfigImpl([]config.RateLimitConfigToLoad{{Name: "bad.yaml", ConfigYaml: root}}, sm, false)
			return false
		}()
		_, err := rls.ParseConfig(rls.File{Name: "bad.yaml", Data: []byte(yml)})
		if !peerRefused || err == nil {
			t.Errorf("%q: peer refused %v, floodgate's error %v; want both refused", yml, peerRefused, err)
		}
	}

	// floodgate's extensions are refused by the peer: a file that uses
	// them is floodgate's only.
	data, err := os.ReadFile("../testdata/extensions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the peer accepted extensions.yaml")
			}
		}()
		config.ConfigFileContentToYaml("extensions.yaml", string(data))
	}()
}
