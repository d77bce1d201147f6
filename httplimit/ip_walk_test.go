package httplimit

import (
	"net/netip"
	"strings"
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

// refForwardedFor is forwardedFor as it was first written, on
// strings.Split.
func refForwardedFor(element string) (netip.Addr, bool) {
	var node string
	found := false
	for _, pair := range strings.Split(element, ";") {
		name, value, ok := strings.Cut(strings.Trim(pair, " \t"), "=")
		if !ok || !strings.EqualFold(strings.Trim(name, " \t"), "for") {
			continue
		}
		if found {
			return netip.Addr{}, false
		}
		node, found = value, true
	}
	if !found {
		return netip.Addr{}, false
	}
	if len(node) >= 2 && node[0] == '"' && node[len(node)-1] == '"' {
		node = unquote(node[1 : len(node)-1])
	}
	return refParseHostAddr(node)
}

// refWalk is the walk as it was first written, splitting every line whole,
// with the two bounds of the new one added in the plainest way: a count of
// the elements read, and the length of each.
func refWalk(r *ipResolver, lines []string, peer netip.Addr) netip.Addr {
	client := peer
	hops := 0
	for i := len(lines) - 1; i >= 0; i-- {
		elements := strings.Split(lines[i], ",")
		for j := len(elements) - 1; j >= 0; j-- {
			if hops == r.maxHops {
				return client
			}
			hops++
			if len(elements[j]) > r.maxElement {
				return client
			}
			var a netip.Addr
			var ok bool
			if r.rfc7239 {
				a, ok = refForwardedFor(elements[j])
			} else {
				a, ok = refParseHostAddr(strings.Trim(elements[j], " \t"))
			}
			if !ok {
				return client
			}
			client = a
			if !r.isTrusted(a) {
				return a
			}
		}
	}
	return client
}

var walkTrusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

// FuzzWalk checks the walk against refWalk on fields of any shape, "\n"
// separating the lines of the field, with the bounds at their defaults or
// lowered (maxHops 1 to 8, maxElement 1 to 64) so that short inputs reach
// them. It also holds the bytes the walk examines to its bounds: no more
// than the field, and no more than maxHops elements of maxElement bytes
// and a separator.
//
//	go test -run '^$' -fuzz FuzzWalk -fuzztime 60s .
func FuzzWalk(f *testing.F) {
	for _, s := range []string{
		"1.1.1.1, 203.0.113.9, 10.1.2.3",
		"203.0.113.9\n10.1.2.3, 10.4.5.6",
		"10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8,10.0.0.9,10.0.0.10",
		"10.0.0.2\n10.0.0.3\n\n10.0.0.4",
		",,,,", "  203.0.113.9  ", "[2001:db8::7]:5555, [2001:db8:ffff::1]", "203.0.113.9:80,unknown,10.0.0.2",
		`for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711"`,
		`for="1.1.1.1, for=203.0.113.9`, `for=_hidden, for=unknown`, `for=1.1.1.1;for=10.0.0.2`,
		`for="10.0.0.\2";by=x, FOR = "[2001:db8:ffff::9]" ; proto=https`, ";;;;", "for=10.0.0.2;\nfor=10.0.0.3,",
	} {
		f.Add(s, false, uint8(0), uint8(0))
		f.Add(s, true, uint8(0), uint8(0))
		f.Add(s, strings.Contains(s, "for="), uint8(3), uint8(12))
	}
	f.Fuzz(func(t *testing.T, field string, rfc7239 bool, hopsBound, elementBound uint8) {
		opts := &IPKeyOptions{TrustedProxies: walkTrusted}
		if rfc7239 {
			opts.ForwardedHeader = "Forwarded"
		}
		r := newIPResolver(opts)
		if hopsBound != 0 {
			r.maxHops = 1 + int(hopsBound)%8
		}
		if elementBound != 0 {
			r.maxElement = 1 + int(elementBound)%64
		}
		lines := strings.Split(field, "\n")
		peer := netip.MustParseAddr("10.0.0.1")
		got, examined := r.walk(lines, peer)
		if want := refWalk(r, lines, peer); got != want {
			t.Fatalf("walk(%q) with at most %d hops of %d bytes = %v; refWalk gives %v", lines, r.maxHops, r.maxElement, got, want)
		}
		if n := len(field) - (len(lines) - 1); examined > n {
			t.Fatalf("walk(%q) examined %d bytes of a %d-byte field", lines, examined, n)
		}
		if bound := r.maxHops * (r.maxElement + 1); examined > bound {
			t.Fatalf("walk(%q) examined %d bytes, above its bound %d", lines, examined, bound)
		}
	})
}

// TestWalkBounds pins the two bounds where they fall: an element of
// maxElementLen bytes is read and one of maxElementLen+1 is malformed, on
// a line's first element and after a separator; maxHops elements are read,
// on one line or many, and the walk stops after them.
func TestWalkBounds(t *testing.T) {
	pad := func(n int, addr string) string { return strings.Repeat(" ", n-len(addr)) + addr }
	trustedHops := func(n int) []string { // 10.0.0.2 (the left-most) ... 10.0.0.n+1 (the right-most)
		hops := make([]string, n)
		for i := range hops {
			hops[i] = netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + i)}).String()
		}
		return hops
	}
	tests := []struct {
		name  string
		lines []string
		want  string
	}{
		{"element of maxElementLen bytes", []string{pad(maxElementLen, "203.0.113.9")}, "203.0.113.9"},
		{"element of maxElementLen+1 bytes", []string{pad(maxElementLen+1, "203.0.113.9")}, "10.0.0.1"},
		{"element of maxElementLen bytes after a separator", []string{"x," + pad(maxElementLen, "203.0.113.9")}, "203.0.113.9"},
		{"element of maxElementLen+1 bytes after a separator", []string{"x," + pad(maxElementLen+1, "203.0.113.9")}, "10.0.0.1"},
		{"long element left of the client", []string{pad(10*maxElementLen, "x") + ", 203.0.113.9"}, "203.0.113.9"},
		{"maxHops-1 trusted hops and the client", []string{strings.Join(append([]string{"203.0.113.9"}, trustedHops(maxHops-1)...), ", ")}, "203.0.113.9"},
		{"maxHops trusted hops and the client", []string{strings.Join(append([]string{"203.0.113.9"}, trustedHops(maxHops)...), ", ")}, "10.0.0.2"},
		{"maxHops-1 trusted lines and the client", append([]string{"203.0.113.9"}, trustedHops(maxHops-1)...), "203.0.113.9"},
		{"maxHops trusted lines and the client", append([]string{"203.0.113.9"}, trustedHops(maxHops)...), "10.0.0.2"},
		{"empty lines are elements", append([]string{"203.0.113.9"}, make([]string, 3)...), "10.0.0.1"},
	}
	r := newIPResolver(&IPKeyOptions{TrustedProxies: walkTrusted})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := r.walk(tt.lines, netip.MustParseAddr("10.0.0.1"))
			if want := netip.MustParseAddr(tt.want); got != want {
				t.Errorf("walk = %v, want %v", got, want)
			}
			if ref := refWalk(r, tt.lines, netip.MustParseAddr("10.0.0.1")); got != ref {
				t.Errorf("walk = %v; refWalk gives %v", got, ref)
			}
		})
	}
}

// TestWalkExaminedDoesNotGrow counts the bytes the walk examines on
// hostile fields of 16 KiB, 1 MiB and 4 MiB: the same for all three, and
// within maxHops elements of maxElementLen bytes. This is the walk's work,
// counted rather than timed.
func TestWalkExaminedDoesNotGrow(t *testing.T) {
	one := func(unit, tail string) func(int) []string {
		return func(size int) []string { return []string{strings.Repeat(unit, size/len(unit)) + tail} }
	}
	many := func(unit string) func(int) []string {
		return func(size int) []string {
			l := make([]string, size/len(unit))
			for i := range l {
				l[i] = unit
			}
			return l
		}
	}
	tests := []struct {
		name    string
		rfc7239 bool
		field   func(size int) []string
	}{
		{"xff commas", false, one(",", "")},
		{"xff trusted addresses", false, one("10.0.0.2, ", "10.0.0.3")},
		{"xff no separator", false, one("1", "")},
		{"xff lines of a trusted address", false, many("10.0.0.2")},
		{"forwarded semicolons", true, one(";", "")},
		{"forwarded trusted elements", true, one("for=10.0.0.2, ", "for=10.0.0.3")},
		{"forwarded lines of a trusted element", true, many("for=10.0.0.2")},
	}
	bound := maxHops * (maxElementLen + 1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &IPKeyOptions{TrustedProxies: walkTrusted}
			if tt.rfc7239 {
				opts.ForwardedHeader = "Forwarded"
			}
			r := newIPResolver(opts)
			var counts []int
			for _, size := range []int{16 << 10, 1 << 20, 4 << 20} {
				_, examined := r.walk(tt.field(size), netip.MustParseAddr("10.0.0.1"))
				counts = append(counts, examined)
			}
			t.Logf("bytes examined at 16 KiB, 1 MiB, 4 MiB: %v (bound %d)", counts, bound)
			for _, n := range counts {
				if n != counts[0] || n > bound {
					t.Errorf("bytes examined at 16 KiB, 1 MiB, 4 MiB = %v, want equal and at most %d", counts, bound)
					break
				}
			}
		})
	}
}

// TestWalkAllocations holds the walk over a well-formed field to no
// allocation at all.
func TestWalkAllocations(t *testing.T) {
	tests := []struct {
		name    string
		rfc7239 bool
		lines   []string
	}{
		{"xff 3 hops", false, []string{"203.0.113.9, 10.1.2.3, 10.4.5.6"}},
		{"xff 3 hops on 3 lines", false, []string{"203.0.113.9", "10.1.2.3", "10.4.5.6"}},
		{"xff ipv6 with ports", false, []string{"[2001:db8::1]:443, [2001:db8:ffff::2]:80, 2001:db8:ffff::3"}},
		{"forwarded 3 hops", true, []string{`for=203.0.113.9;proto=https, for="[2001:db8:ffff::2]:443";by=10.0.0.1, for=10.4.5.6`}},
		{"maxHops trusted hops", false, []string{strings.Repeat("10.0.0.2, ", maxHops) + "10.0.0.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &IPKeyOptions{TrustedProxies: walkTrusted}
			if tt.rfc7239 {
				opts.ForwardedHeader = "Forwarded"
			}
			r := newIPResolver(opts)
			peer := netip.MustParseAddr("10.0.0.1")
			if allocs := testing.AllocsPerRun(1000, func() { r.walk(tt.lines, peer) }); allocs != 0 {
				t.Errorf("walk(%q) allocates %v times, want 0", tt.lines, allocs)
			}
		})
	}
}

// TestKeyText holds key, which appends into a buffer, to the text of
// "ip:" + String() for every prefix length of addresses of each kind.
func TestKeyText(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "192.0.2.77", "255.255.255.255", "::", "2001:db8:1:2:aaaa:bbbb:cccc:dddd",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::ffff:192.0.2.1", "fe80::1"} {
		a := netip.MustParseAddr(s).Unmap()
		for bits := 0; bits <= 129; bits++ {
			r := newIPResolver(&IPKeyOptions{IPv4Prefix: bits, IPv6Prefix: bits})
			want := a.String()
			if n := map[bool]int{true: r.v4Bits, false: r.v6Bits}[a.Is4()]; n != a.BitLen() {
				want = netip.PrefixFrom(a, n).Masked().String()
			}
			if got := r.key(a); got != "ip:"+want {
				t.Errorf("key(%v) with IPv4Prefix = IPv6Prefix = %d: %q, want %q", a, bits, got, "ip:"+want)
			}
		}
	}
}
