package httplimit

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// IPKeyOptions configures KeyByIP and ClientIP. A nil *IPKeyOptions means the
// defaults: the peer address only, IPv4 addresses whole, IPv6 addresses by
// /64. The zero value is the same. KeyByIP copies the options, so they may be
// reused or changed afterwards.
type IPKeyOptions struct {
	// TrustedProxies are the networks of the reverse proxies and load
	// balancers in front of the server. Only when the peer of a request
	// (its RemoteAddr) lies in one of them is ForwardedHeader read, from
	// right to left: each trusted hop is skipped, and the first address
	// that is not trusted is the client. Left of it everything is written
	// by the client and ignored. The default, none, trusts no header: a
	// client cannot choose its own key by sending X-Forwarded-For.
	//
	// When a trusted proxy sends no usable address (the header is absent,
	// or holds "unknown" or an obfuscated node where the walk stops), the
	// last trusted address is the client: such requests share one key,
	// which is safe but coarse; fix the proxy.
	//
	// The walk is bounded whatever a client sends: it reads at most 32
	// hops (elements, counted across all lines of the field; a line holds
	// at least one), and an element longer than 1024 bytes is malformed.
	// Either bound ends the walk as a malformed element does, at the last
	// trusted address. The field is never split or copied: what a request
	// costs does not grow with the length of its field or the number of
	// its lines.
	TrustedProxies []netip.Prefix

	// ForwardedHeader is the field the trusted proxies append the client
	// address to: "X-Forwarded-For" (the default), "Forwarded" (RFC 7239,
	// its for= parameters), or any field holding a comma-separated list of
	// addresses ("X-Real-IP" is a list of one). Several lines of the
	// field are one list, joined in order. Name the one your proxies
	// write: a field they pass through untouched is written by the client.
	ForwardedHeader string

	// IPv4Prefix is the prefix length IPv4 clients are grouped by. The
	// default, 0, means 32 (each address on its own); values above 32
	// mean 32.
	IPv4Prefix int

	// IPv6Prefix is the prefix length IPv6 clients are grouped by. The
	// default, 0, means 64: a single host commonly holds a whole /64 and
	// could otherwise rotate through 2^64 keys. Values above 128 mean 128.
	IPv6Prefix int
}

// The bounds of the walk through a forwarding field. A field is written by
// the client first and the proxies after, so its length is the client's
// choice: without them a 1 MiB field costs a 1 MiB walk.
const (
	// maxHops is the number of elements the walk reads. Real chains of
	// trusted proxies are a handful of hops long.
	maxHops = 32
	// maxElementLen is the length in bytes of the longest element read.
	// An X-Forwarded-For element, an address with a port, is at most 53
	// bytes and the spaces around it; a Forwarded element with for=, by=,
	// proto= and a host= of a 253-byte name stays under 400.
	maxElementLen = 1024
)

// ipResolver is IPKeyOptions with its defaults applied.
type ipResolver struct {
	trusted    []netip.Prefix
	header     string // canonical, to index http.Header without allocating
	rfc7239    bool
	v4Bits     int
	v6Bits     int
	anyTrusted bool
	maxHops    int // maxHops; a field so that tests can lower it
	maxElement int // maxElementLen; a field so that tests can lower it
}

func newIPResolver(opts *IPKeyOptions) *ipResolver {
	var o IPKeyOptions
	if opts != nil {
		o = *opts
	}
	r := &ipResolver{
		header: o.ForwardedHeader, v4Bits: o.IPv4Prefix, v6Bits: o.IPv6Prefix,
		maxHops: maxHops, maxElement: maxElementLen,
	}
	if r.header == "" {
		r.header = "X-Forwarded-For"
	}
	// Header.Values canonicalizes its argument on every call, which
	// allocates for a name such as "x-real-ip"; once here is enough.
	r.header = textproto.CanonicalMIMEHeaderKey(r.header)
	r.rfc7239 = strings.EqualFold(r.header, "Forwarded")
	if r.v4Bits <= 0 || r.v4Bits > 32 {
		r.v4Bits = 32
	}
	if r.v6Bits <= 0 {
		r.v6Bits = 64
	}
	r.v6Bits = min(r.v6Bits, 128)
	for _, p := range o.TrustedProxies {
		if !p.IsValid() {
			continue // an invalid prefix matches nothing: distrust, the safe side
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		r.trusted = append(r.trusted, p.Masked())
	}
	r.anyTrusted = len(r.trusted) > 0
	return r
}

func (r *ipResolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// KeyByIP returns a KeyFunc that keys requests by client address, as
// ClientIP finds it, grouped by prefix: "ip:192.0.2.7" for a whole IPv4
// address, "ip:2001:db8:1:2::/64" for an IPv6 /64. A request whose
// RemoteAddr is not an IP address has no key.
func KeyByIP(opts *IPKeyOptions) KeyFunc {
	res := newIPResolver(opts)
	return func(r *http.Request) (string, bool) {
		a, ok := res.clientIP(r)
		if !ok {
			return "", false
		}
		return res.key(a), true
	}
}

// key returns "ip:" and the textual prefix a belongs to. It writes both
// into an array on the stack and converts once: one allocation, where
// "ip:" + a.String() takes two.
func (r *ipResolver) key(a netip.Addr) string {
	bits := r.v6Bits
	if a.Is4() {
		bits = r.v4Bits
	}
	// "ip:" and the longest prefix without a zone,
	// "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", are 46 bytes.
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if p, err := a.Prefix(bits); err == nil && bits != a.BitLen() {
		b = p.AppendTo(b)
	} else {
		b = a.AppendTo(b)
	}
	return string(b)
}

// ClientIP returns the address of the client that sent r, as seen through the
// trusted proxies of opts (see IPKeyOptions), and false when RemoteAddr is
// not an IP address. IPv4-mapped IPv6 addresses are returned as IPv4, and
// zones are dropped. With nil opts it is the peer address.
func ClientIP(r *http.Request, opts *IPKeyOptions) (netip.Addr, bool) {
	return newIPResolver(opts).clientIP(r)
}

func (r *ipResolver) clientIP(req *http.Request) (netip.Addr, bool) {
	peer, ok := parseHostAddr(req.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !r.anyTrusted || !r.isTrusted(peer) {
		return peer, true
	}
	client, _ := r.walk(req.Header[r.header], peer)
	return client, true
}

// walk returns the client address that the lines of a forwarding field
// name, read from the right, when the trusted peer sent them: the last one
// was appended by the peer, and each trusted hop vouches for the one to its
// left. The lines are one list joined in order. It also returns the number
// of bytes its separator scans read, which tests hold against the bounds
// (parsing reads each element's bytes a few times more).
//
// Each element is found by a backward scan for its separator, no further
// than maxElement bytes, and parsed where it lies: nothing is split or
// copied, so the work is at most maxHops elements of maxElement bytes
// whatever the length of the field or the number of its lines.
func (r *ipResolver) walk(lines []string, peer netip.Addr) (client netip.Addr, examined int) {
	client = peer
	hops := 0
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for end := len(line); ; {
			if hops == r.maxHops {
				// All trusted so far, and no deeper: the last trusted
				// address is all we know.
				return client, examined
			}
			hops++
			// A separator left of lo would make the element too long:
			// the scan, from the right, stops there.
			lo := max(0, end-r.maxElement-1)
			sep := strings.LastIndexByte(line[lo:end], ',')
			examined += end - lo - max(sep, 0)
			start := lo + sep + 1
			if sep < 0 && lo > 0 || end-start > r.maxElement {
				return client, examined // too long: malformed
			}
			var a netip.Addr
			var ok bool
			if r.rfc7239 {
				a, ok = forwardedFor(line[start:end])
			} else {
				a, ok = parseHostAddr(strings.Trim(line[start:end], " \t"))
			}
			if !ok {
				// Unknown, obfuscated or malformed, yet written by a
				// trusted hop: the last trusted address is all we know.
				return client, examined
			}
			client = a
			if !r.isTrusted(a) {
				return a, examined
			}
			if start == 0 {
				break // the line's first element; on to the line before
			}
			end = start - 1
		}
	}
	return client, examined
}

// parseHostAddr reads an address with or without a port: "192.0.2.7",
// "192.0.2.7:443", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443".
//
// It calls the one netip parser that can succeed on the shape of s rather
// than trying ParseAddrPort first and ParseAddr after: a failed parse
// allocates its error, and the walk parses every element it reads. The
// result is what trying both gives; FuzzParseHostAddr holds the two
// together.
func parseHostAddr(s string) (netip.Addr, bool) {
	var a netip.Addr
	var err error
	switch {
	case s == "":
		// An empty element, as in a field of commas. netip fails on it
		// too, but allocates its error.
		return netip.Addr{}, false
	case len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']':
		// "[2001:db8::1]". ParseAddrPort fails on it: a port does not
		// end in ']'.
		a, err = netip.ParseAddr(s[1 : len(s)-1])
	case s != "" && s[0] == '[' || strings.Count(s, ":") == 1:
		// "[2001:db8::1]:443" or "192.0.2.7:443". ParseAddr fails on
		// both shapes: an address does not begin with '[', and has no
		// colon (IPv4) or two at least (IPv6).
		var ap netip.AddrPort
		ap, err = netip.ParseAddrPort(s)
		a = ap.Addr()
	default:
		// "192.0.2.7" or "2001:db8::1". ParseAddrPort fails on both:
		// the first has no colon, and it takes IPv6 in brackets only.
		a, err = netip.ParseAddr(s)
	}
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// forwardedFor returns the address in the for= parameter of one RFC 7239
// forwarded-element ("for=192.0.2.60;proto=http;by=203.0.113.43"). Elements
// are split on commas by the caller without regard to quoting: the values a
// proxy writes (addresses, ports) contain neither commas nor semicolons, and
// a quote the client left open must not swallow the elements appended after
// it by trusted proxies. Pairs are split on semicolons the same way, in
// place.
func forwardedFor(element string) (netip.Addr, bool) {
	var node string
	found := false
	for rest, more := element, true; more; {
		var pair string
		pair, rest, more = strings.Cut(rest, ";")
		name, value, ok := strings.Cut(strings.Trim(pair, " \t"), "=")
		if !ok || !strings.EqualFold(strings.Trim(name, " \t"), "for") {
			continue
		}
		if found {
			return netip.Addr{}, false // two for= in one element: malformed
		}
		node, found = value, true
	}
	if !found {
		return netip.Addr{}, false
	}
	if len(node) >= 2 && node[0] == '"' && node[len(node)-1] == '"' {
		node = unquote(node[1 : len(node)-1])
	}
	// node = nodename [ ":" node-port ]; an IPv6 nodename is bracketed.
	// "unknown" and obfuscated names ("_hidden") are no address.
	return parseHostAddr(node)
}

// unquote removes the backslash escapes of an RFC 9110 quoted-string body.
func unquote(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
