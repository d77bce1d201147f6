package httplimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

var proxies = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
}

func TestClientIP(t *testing.T) {
	xff := &httplimit.IPKeyOptions{TrustedProxies: proxies}
	fwd := &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "Forwarded"}
	tests := []struct {
		name   string
		opts   *httplimit.IPKeyOptions
		remote string
		hdr    []string
		want   string
	}{
		{"peer only", nil, "192.0.2.1:1234", nil, "192.0.2.1"},
		{"peer without port", nil, "192.0.2.1", nil, "192.0.2.1"},
		{"ipv6 peer", nil, "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"ipv6 zone dropped", nil, "[fe80::1%eth0]:443", nil, "fe80::1"},
		{"ipv4-mapped unmapped", nil, "[::ffff:192.0.2.1]:1234", nil, "192.0.2.1"},
		{"untrusted peer: XFF ignored", xff, "192.0.2.1:1234", []string{"X-Forwarded-For", "203.0.113.9"}, "192.0.2.1"},
		{"default trusts nobody", nil, "10.0.0.1:1234", []string{"X-Forwarded-For", "203.0.113.9"}, "10.0.0.1"},
		{"trusted peer", xff, "10.0.0.1:1234", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9"},
		{"right-most untrusted wins over forged left entries", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "1.1.1.1, 8.8.8.8, 203.0.113.9"}, "203.0.113.9"},
		{"trusted hops skipped", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "1.1.1.1, 203.0.113.9, 10.1.2.3, 10.4.5.6"}, "203.0.113.9"},
		{"several field lines", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{"entries with ports and brackets", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "[2001:db8::7]:5555"}, "2001:db8::7"},
		{"garbage left of the client is ignored", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "not-an-ip, ,, 203.0.113.9"}, "203.0.113.9"},
		{"garbage from a trusted hop stops at that hop", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "203.0.113.9, unknown, 10.1.2.3"}, "10.1.2.3"},
		{"trusted peer without header", xff, "10.0.0.1:1234", nil, "10.0.0.1"},
		{"all hops trusted", xff, "10.0.0.1:1234", []string{"X-Forwarded-For", "10.9.9.9, 10.1.1.1"}, "10.9.9.9"},
		{"ipv6 trusted proxy", xff, "[2001:db8:ffff::1]:443", []string{"X-Forwarded-For", "2001:db8:1::5"}, "2001:db8:1::5"},
		{"forwarded", fwd, "10.0.0.1:1234",
			[]string{"Forwarded", `for=192.0.2.60;proto=http;by=203.0.113.43`}, "192.0.2.60"},
		{"forwarded quoted ipv6 with port", fwd, "10.0.0.1:1234",
			[]string{"Forwarded", `for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"forwarded right-most untrusted", fwd, "10.0.0.1:1234",
			[]string{"Forwarded", `for=1.1.1.1, for=203.0.113.9;proto=https, For="10.2.2.2"`}, "203.0.113.9"},
		{"forwarded unbalanced quote from the client", fwd, "10.0.0.1:1234",
			[]string{"Forwarded", `for="1.1.1.1, for=203.0.113.9`}, "203.0.113.9"},
		{"forwarded unknown from a trusted hop", fwd, "10.0.0.1:1234",
			[]string{"Forwarded", `for=203.0.113.9, for=unknown`}, "10.0.0.1"},
		{"forwarded obfuscated", fwd, "10.0.0.1:1234", []string{"Forwarded", `for=_hidden`}, "10.0.0.1"},
		{"forwarded element without for", fwd, "10.0.0.1:1234", []string{"Forwarded", `proto=https`}, "10.0.0.1"},
		{"forwarded ignores X-Forwarded-For", fwd, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=198.51.100.1"}, "198.51.100.1"},
		{"xff ignores Forwarded", xff, "10.0.0.1:1234",
			[]string{"X-Forwarded-For", "203.0.113.9", "Forwarded", "for=198.51.100.1"}, "203.0.113.9"},
		{"custom single-address header", &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "X-Real-IP"},
			"10.0.0.1:1234", []string{"X-Real-IP", "203.0.113.9"}, "203.0.113.9"},
		{"mapped trusted prefix", &httplimit.IPKeyOptions{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}},
			"10.0.0.1:1234", []string{"X-Forwarded-For", "203.0.113.9"}, "203.0.113.9"},
		{"invalid trusted prefix trusts nothing", &httplimit.IPKeyOptions{TrustedProxies: []netip.Prefix{{}}},
			"10.0.0.1:1234", []string{"X-Forwarded-For", "203.0.113.9"}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tt.remote
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				req.Header.Add(tt.hdr[i], tt.hdr[i+1])
			}
			got, ok := httplimit.ClientIP(req, tt.opts)
			require.True(t, ok, "ClientIP(%q, %q) found no address", tt.remote, tt.hdr)
			assert.Equal(t, netip.MustParseAddr(tt.want), got, "ClientIP(%q, %q)", tt.remote, tt.hdr)
		})
	}

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "@unix-socket"
	_, ok := httplimit.ClientIP(req, nil)
	assert.False(t, ok, "ClientIP of a non-IP RemoteAddr")
	_, ok = httplimit.KeyByIP(nil)(req)
	assert.False(t, ok, "KeyByIP of a non-IP RemoteAddr")
}

func TestKeyByIPGroups(t *testing.T) {
	tests := []struct {
		name   string
		opts   *httplimit.IPKeyOptions
		remote string
		want   string
	}{
		{"ipv4 whole", nil, "192.0.2.77:1", "ip:192.0.2.77"},
		{"ipv6 /64 by default", nil, "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1", "ip:2001:db8:1:2::/64"},
		{"ipv6 /56", &httplimit.IPKeyOptions{IPv6Prefix: 56}, "[2001:db8:1:2ff::1]:1", "ip:2001:db8:1:200::/56"},
		{"ipv6 whole", &httplimit.IPKeyOptions{IPv6Prefix: 128}, "[2001:db8::1]:1", "ip:2001:db8::1"},
		{"ipv6 beyond 128 means 128", &httplimit.IPKeyOptions{IPv6Prefix: 200}, "[2001:db8::1]:1", "ip:2001:db8::1"},
		{"ipv4 /24", &httplimit.IPKeyOptions{IPv4Prefix: 24}, "192.0.2.77:1", "ip:192.0.2.0/24"},
		{"ipv4 beyond 32 means 32", &httplimit.IPKeyOptions{IPv4Prefix: 40}, "192.0.2.77:1", "ip:192.0.2.77"},
		{"mapped ipv4 keyed as ipv4", nil, "[::ffff:192.0.2.77]:1", "ip:192.0.2.77"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tt.remote
			got, ok := httplimit.KeyByIP(tt.opts)(req)
			require.True(t, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestSpoofingDoesNotEscapeTheLimit drives real limits through the
// middleware with requests that try to pass as many clients.
func TestSpoofingDoesNotEscapeTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randomV4 := func() string {
		return netip.AddrFrom4([4]byte{byte(rng.UintN(223) + 1), byte(rng.UintN(256)), byte(rng.UintN(256)), byte(rng.UintN(256))}).String()
	}
	tests := []struct {
		name string
		opts *httplimit.IPKeyOptions
		// request returns the RemoteAddr and header fields of attempt i.
		request func(i int) (string, []string)
	}{
		{"forged X-Forwarded-For from an untrusted peer", nil, func(int) (string, []string) {
			return "198.51.100.7:40000", []string{"X-Forwarded-For", randomV4()}
		}},
		{"forged X-Forwarded-For from an untrusted peer that knows the proxies", &httplimit.IPKeyOptions{TrustedProxies: proxies},
			func(int) (string, []string) {
				return "198.51.100.7:40000", []string{"X-Forwarded-For", randomV4() + ", 10.0.0.1"}
			}},
		{"forged Forwarded from an untrusted peer", &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "Forwarded"},
			func(int) (string, []string) {
				return "198.51.100.7:40000", []string{"Forwarded", "for=" + randomV4()}
			}},
		{"entries prepended before a trusted proxy's", &httplimit.IPKeyOptions{TrustedProxies: proxies},
			func(int) (string, []string) {
				return "10.0.0.1:40000", []string{"X-Forwarded-For", randomV4() + ", " + randomV4() + ", 198.51.100.7"}
			}},
		// Alternating clean and poisoned headers: if the poison made the
		// whole field unusable, the poisoned requests would fall back to
		// another key (the proxy's) and get a second quota.
		{"garbage prepended before a trusted proxy's", &httplimit.IPKeyOptions{TrustedProxies: proxies},
			func(i int) (string, []string) {
				if i%2 == 0 {
					return "10.0.0.1:40000", []string{"X-Forwarded-For", "198.51.100.7"}
				}
				return "10.0.0.1:40000", []string{"X-Forwarded-For", fmt.Sprintf("garbage-%d,\"[", i), "X-Forwarded-For", "198.51.100.7"}
			}},
		{"Forwarded with an open quote before a trusted proxy's element", &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "Forwarded"},
			func(i int) (string, []string) {
				if i%2 == 0 {
					return "10.0.0.1:40000", []string{"Forwarded", "for=198.51.100.7"}
				}
				return "10.0.0.1:40000", []string{"Forwarded", fmt.Sprintf(`for="%s, for=198.51.100.7`, randomV4())}
			}},
		{"many addresses of one IPv6 /64", nil, func(int) (string, []string) {
			var a [16]byte
			copy(a[:], netip.MustParseAddr("2001:db8:aa:bb::").AsSlice())
			for j := 8; j < 16; j++ {
				a[j] = byte(rng.UintN(256))
			}
			return netip.AddrPortFrom(netip.AddrFrom16(a), 443).String(), nil
		}},
		{"many /64s of one /56 when grouping by /56", &httplimit.IPKeyOptions{IPv6Prefix: 56}, func(int) (string, []string) {
			var a [16]byte
			copy(a[:], netip.MustParseAddr("2001:db8:aa:bb00::").AsSlice())
			for j := 7; j < 16; j++ {
				a[j] = byte(rng.UintN(256))
			}
			return netip.AddrPortFrom(netip.AddrFrom16(a), 443).String(), nil
		}},
		{"IPv4 and its IPv4-mapped form", nil, func(i int) (string, []string) {
			if i%2 == 0 {
				return "198.51.100.7:1", nil
			}
			return "[::ffff:198.51.100.7]:1", nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := floodgate.New(newStore(t), floodgate.FixedWindow{Limit: 5, Window: time.Hour}, nil)
			require.NoError(t, err)
			next := &okHandler{}
			h := newMW(t, lim, &httplimit.Options{Key: httplimit.KeyByIP(tt.opts)})(next)
			var codes []int
			for i := range 40 {
				remote, hdr := tt.request(i)
				codes = append(codes, do(t, h, remote, hdr...).Code)
			}
			assert.Equal(t, 5, next.served(), "requests admitted under a limit of 5; statuses %v", codes)
		})
	}
}

func TestKeyByAPIKey(t *testing.T) {
	f := httplimit.KeyByAPIKey("X-API-Key")
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	_, ok := f(req)
	assert.False(t, ok, "a request without the header has no key")

	req.Header.Set("X-API-Key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc")
	k1, ok := f(req)
	require.True(t, ok)
	assert.Regexp(t, `^key:[A-Za-z0-9_-]{22}$`, k1)
	assert.NotContains(t, k1, "sk_live", "the raw secret leaked into the key")
	k2, _ := f(req)
	assert.Equal(t, k1, k2, "the key is not stable")

	req.Header.Set("X-API-Key", "sk_live_4eC39HqLyjWDarjtT1zdp7dd")
	k3, _ := f(req)
	assert.NotEqual(t, k1, k3)

	req.Header.Set("X-API-Key", string(make([]byte, 10000)))
	k4, ok := f(req)
	require.True(t, ok)
	assert.Len(t, k4, len(k1), "long values give keys of the same length")
}

type subjectKey struct{}

type userID int

func (u userID) String() string { return fmt.Sprintf("user-%d", int(u)) }

type accountID string

type nilStringer struct{ name string }

func (n *nilStringer) String() string { return n.name }

func TestKeyBySubjectAndChain(t *testing.T) {
	bySubject := httplimit.KeyBySubject(subjectKey{})
	chain := httplimit.KeyChain(nil, bySubject, httplimit.KeyByAPIKey("X-API-Key"), httplimit.KeyByIP(nil))
	withSubject := func(v any) *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:1"
		if v != nil {
			req = req.WithContext(contextWith(req, v))
		}
		return req
	}
	long := string(make([]byte, 200))
	tests := []struct {
		name string
		req  *http.Request
		want string
	}{
		{"string subject", withSubject("alice"), "sub:alice"},
		{"stringer subject", withSubject(userID(7)), "sub:user-7"},
		{"named string subject", withSubject(accountID("acct_9")), "sub:acct_9"},
		{"long subject hashed", withSubject(long), ""},
		{"empty subject falls through to the address", withSubject(""), "ip:192.0.2.1"},
		{"typed nil falls through", withSubject((*nilStringer)(nil)), "ip:192.0.2.1"},
		{"other type falls through", withSubject(42), "ip:192.0.2.1"},
		{"no subject", withSubject(nil), "ip:192.0.2.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := chain(tt.req)
			require.True(t, ok)
			if tt.want == "" {
				assert.Regexp(t, `^sub#[A-Za-z0-9_-]{22}$`, got)
				return
			}
			assert.Equal(t, tt.want, got)
		})
	}

	req := withSubject(nil)
	req.Header.Set("X-API-Key", "secret")
	got, _ := chain(req)
	assert.Regexp(t, `^key:`, got, "the API key comes before the address in the chain")

	_, ok := httplimit.KeyChain()(req)
	assert.False(t, ok, "an empty chain found a key")
}

func contextWith(req *http.Request, v any) context.Context {
	return context.WithValue(req.Context(), subjectKey{}, v)
}

// TestKeyByIPAllocations holds the cost of a well-formed field from
// trusted proxies to the one allocation of the key it returns: none per
// hop.
func TestKeyByIPAllocations(t *testing.T) {
	tests := []struct {
		name string
		opts *httplimit.IPKeyOptions
		hdr  []string
		want string
	}{
		{"peer only", nil, nil, "ip:10.0.0.1"},
		{"x-forwarded-for, 3 hops", &httplimit.IPKeyOptions{TrustedProxies: proxies},
			[]string{"X-Forwarded-For", "203.0.113.9, 10.1.2.3, 10.4.5.6"}, "ip:203.0.113.9"},
		{"x-forwarded-for, 3 hops with ports", &httplimit.IPKeyOptions{TrustedProxies: proxies},
			[]string{"X-Forwarded-For", "203.0.113.9:5555, [2001:db8:ffff::2]:443, 10.4.5.6:80"}, "ip:203.0.113.9"},
		{"forwarded, 3 hops", &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "Forwarded"},
			[]string{"Forwarded", `for=203.0.113.9;proto=https, for="[2001:db8:ffff::2]:443";by=10.0.0.1, for=10.4.5.6`}, "ip:203.0.113.9"},
		{"x-forwarded-for, 3 hops on 3 lines", &httplimit.IPKeyOptions{TrustedProxies: proxies},
			[]string{"X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "10.1.2.3", "X-Forwarded-For", "10.4.5.6"}, "ip:203.0.113.9"},
		{"x-real-ip in lower case", &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "x-real-ip"},
			[]string{"X-Real-Ip", "203.0.113.9"}, "ip:203.0.113.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "10.0.0.1:1234"
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				req.Header.Add(tt.hdr[i], tt.hdr[i+1])
			}
			key := httplimit.KeyByIP(tt.opts)
			got, ok := key(req)
			require.True(t, ok)
			require.Equal(t, tt.want, got)
			allocs := testing.AllocsPerRun(1000, func() { _, _ = key(req) })
			assert.LessOrEqual(t, allocs, 1.0, "allocations per KeyByIP(%q)", tt.hdr)
		})
	}
}
