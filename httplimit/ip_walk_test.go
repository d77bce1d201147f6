package httplimit

import (
	"net/netip"
	"testing"
)

// refParseHostAddr is parseHostAddr as it was first written: ParseAddrPort,
// and on failure ParseAddr without brackets. parseHostAddr must agree with
// it everywhere.
func refParseHostAddr(s string) (netip.Addr, bool) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else {
		if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			s = s[1 : len(s)-1]
		}
		if a, err = netip.ParseAddr(s); err != nil {
			return netip.Addr{}, false
		}
	}
	return a.WithZone("").Unmap(), true
}

// FuzzParseHostAddr checks parseHostAddr, which picks its netip parser by
// the shape of its input, against refParseHostAddr, which tries both.
//
//	go test -run '^$' -fuzz FuzzParseHostAddr -fuzztime 30s .
func FuzzParseHostAddr(f *testing.F) {
	for _, s := range []string{
		"", "[", "[]", "[::1]", "[::1]:80", "[1.2.3.4]", "[1.2.3.4]:80", "1.2.3.4", "1.2.3.4:80",
		"1.2.3.4:", ":80", "::1", "::1:80", "::ffff:1.2.3.4", "[::ffff:1.2.3.4]:1", "fe80::1%eth0",
		"[fe80::1%eth0]:443", "fe80::1%a:b", "1.2.3.4%x:80", "%:1", "[::1]:65536", "[::1]:+1", "1:2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseHostAddr(s)
		want, wantOK := refParseHostAddr(s)
		if got != want || ok != wantOK {
			t.Fatalf("parseHostAddr(%q) = %v, %v; the reference gives %v, %v", s, got, ok, want, wantOK)
		}
	})
}
