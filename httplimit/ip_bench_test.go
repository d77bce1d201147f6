package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate/httplimit"
)

// BenchmarkKeyByIP measures KeyByIP behind trusted proxies on a well-formed
// 3-hop field and on each hostile 1 MiB field of hostileFields.
//
//	go test -run '^$' -bench KeyByIP -benchmem -count 5 .
func BenchmarkKeyByIP(b *testing.B) {
	xff := &httplimit.IPKeyOptions{TrustedProxies: proxies}
	fwd := &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "Forwarded"}
	for _, bm := range []struct {
		name string
		opts *httplimit.IPKeyOptions
		hdr  []string
	}{
		{"peer", nil, nil},
		{"xff 3 hops", xff, []string{"X-Forwarded-For", "203.0.113.9, 10.1.2.3, 10.4.5.6"}},
		{"forwarded 3 hops", fwd, []string{"Forwarded", `for=203.0.113.9;proto=https, for="[2001:db8:ffff::2]:443";by=10.0.0.1, for=10.4.5.6`}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "10.0.0.1:1234"
			for i := 0; i+1 < len(bm.hdr); i += 2 {
				req.Header.Add(bm.hdr[i], bm.hdr[i+1])
			}
			benchmarkKey(b, httplimit.KeyByIP(bm.opts), req)
		})
	}
	for _, h := range hostileFields {
		b.Run("1MiB "+h.name, func(b *testing.B) {
			benchmarkKey(b, httplimit.KeyByIP(h.opts), h.request(1<<20))
		})
	}
}

func benchmarkKey(b *testing.B, key httplimit.KeyFunc, req *http.Request) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := key(req); !ok {
			b.Fatal("no key")
		}
	}
}
