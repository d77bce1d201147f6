package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/httplimit"
)

// FuzzClientIP feeds arbitrary peers and forwarding fields to the client
// address resolution. It must never panic, must return the peer itself
// whenever the peer is not a trusted proxy, and must only ever return the
// peer or an address that appears in the field.
//
//	go test -run '^$' -fuzz FuzzClientIP -fuzztime 30s .
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1234", "1.1.1.1, 203.0.113.9, 10.1.2.3", "", false)
	f.Add("10.0.0.1:1234", "", `for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`, true)
	f.Add("10.0.0.1:1234", "", `for="1.1.1.1, for=203.0.113.9`, true)
	f.Add("10.0.0.1", "unknown, 10.0.0.2", `for=_hidden, for=unknown`, true)
	f.Add("[2001:db8:ffff::1]:443", "[2001:db8::7]:5555, 2001:db8::8", "", false)
	f.Add("[::ffff:10.0.0.9]:1", "::ffff:192.0.2.1", `For="[::ffff:192.0.2.1]"`, true)
	f.Add("192.0.2.1:1234", "203.0.113.9", "for=203.0.113.9", false)
	f.Add("@unix", "203.0.113.9", "", false)
	f.Add("[fe80::1%eth0]:80", `"\`, `for=";;,,\"`, true)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	f.Fuzz(func(t *testing.T, remote, xff, forwarded string, rfc7239 bool) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = remote
		if xff != "" {
			req.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		}
		if forwarded != "" {
			req.Header["Forwarded"] = strings.Split(forwarded, "\n")
		}
		opts := &httplimit.IPKeyOptions{TrustedProxies: trusted}
		field := xff
		if rfc7239 {
			opts.ForwardedHeader = "Forwarded"
			field = forwarded
		}
		got, ok := httplimit.ClientIP(req, opts)
		peer, peerOK := httplimit.ClientIP(req, nil)
		if ok != peerOK {
			t.Fatalf("ClientIP(%q) ok = %v, but the peer alone gives %v", remote, ok, peerOK)
		}
		if !ok {
			return
		}
		if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
			t.Fatalf("ClientIP(%q, %q) = %v: not a plain address", remote, field, got)
		}
		isTrusted := false
		for _, p := range trusted {
			isTrusted = isTrusted || p.Contains(peer)
		}
		if !isTrusted && got != peer {
			t.Fatalf("ClientIP(%q, %q) = %v: an untrusted peer %v chose its own address", remote, field, got, peer)
		}
		if got != peer && !addressesIn(field)[got] {
			t.Fatalf("ClientIP(%q, %q) = %v: neither the peer nor an address of the field", remote, field, got)
		}
		if key, ok := httplimit.KeyByIP(opts)(req); !ok || !strings.HasPrefix(key, "ip:") {
			t.Fatalf("KeyByIP(%q, %q) = %q, %v", remote, field, key, ok)
		}
	})
}

// addressesIn returns every address written anywhere in s, in any of the
// forms the resolver reads (with a port, brackets, a zone, quoting).
func addressesIn(s string) map[netip.Addr]bool {
	found := map[netip.Addr]bool{}
	isAddrChar := func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.' || c == '%'
	}
	for _, text := range []string{s, strings.ReplaceAll(s, `\`, "")} {
		for i := 0; i < len(text); i++ {
			for j := i + 1; j <= len(text) && isAddrChar(text[j-1]); j++ {
				run := text[i:j]
				if a, err := netip.ParseAddr(run); err == nil {
					found[a.WithZone("").Unmap()] = true
				}
				if ap, err := netip.ParseAddrPort(run); err == nil {
					found[ap.Addr().WithZone("").Unmap()] = true
				}
			}
		}
	}
	return found
}
