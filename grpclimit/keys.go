package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// KeyFunc returns the rate-limit key of a call of the method fullMethod
// ("/package.Service/Method"), from the call's context (its peer, incoming
// metadata, or what an earlier interceptor stored), and false when it
// cannot name one, so that a KeyChain can try the next function. A KeyFunc
// must be safe for concurrent use.
//
// The key functions of this package prefix what they return ("ip:",
// "addr:", "key:"), so that keys of different kinds never collide in one
// store.
type KeyFunc func(ctx context.Context, fullMethod string) (key string, ok bool)

// KeyChain returns a KeyFunc that tries fns in order and returns the first
// key found; a function that reports false or an empty key falls through to
// the next. Nil functions are skipped. Only when every function finds none
// does the chain find none, and the call is refused with
// codes.Unauthenticated (ErrNoKey).
func KeyChain(fns ...KeyFunc) KeyFunc {
	fns = append([]KeyFunc(nil), fns...) // later changes to the caller's slice do not leak in
	return func(ctx context.Context, fullMethod string) (string, bool) {
		for _, f := range fns {
			if f == nil {
				continue
			}
			if k, ok := f(ctx, fullMethod); ok && k != "" {
				return k, true
			}
		}
		return "", false
	}
}

// KeyByPeer is the default KeyFunc: the call's peer address, without its
// port. An IPv4 peer is "ip:192.0.2.1"; an IPv6 peer is grouped by its /64,
// "ip:2001:db8:1:2::/64", since one host commonly holds a whole /64 (as
// httplimit.KeyByIP does by default). A peer whose address is not an IP
// address (a Unix socket, an in-memory listener such as bufconn) is
// "addr:" and its address's String: every client of such a listener
// shares one quota. A call without a peer in its context has no key.
//
// The peer is the one of the connection: behind a proxy or a load
// balancer that does not pass addresses through, every call has the
// proxy's address. Key by a credential (KeyByMetadata) or by what an
// authentication interceptor stored there instead. It costs one
// allocation, the key.
func KeyByPeer(ctx context.Context, _ string) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", false
	}
	var ip netip.Addr
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.IPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		// Only a string with a colon may be an address and port: parsing
		// one without (bufconn's "bufconn", a Unix socket's path)
		// would allocate its error on every call.
		if s := a.String(); strings.IndexByte(s, ':') >= 0 {
			if ap, err := netip.ParseAddrPort(s); err == nil {
				ip = ap.Addr()
			}
		}
	}
	if !ip.IsValid() {
		return "addr:" + p.Addr.String(), true
	}
	ip = ip.Unmap()
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if ip.Is4() {
		b = ip.AppendTo(b)
	} else {
		pfx, _ := ip.WithZone("").Prefix(64) // cannot fail: 64 bits of an IPv6 address
		b = pfx.AppendTo(b)
	}
	return string(b), true
}

// KeyByMetadata returns a KeyFunc that keys calls by the first value of the
// incoming metadata name (an API key header such as "x-api-key"; gRPC
// metadata names are lower case, and name is lowered as gRPC lowers it). A
// call without the entry, or with an empty first value, has no key.
//
// The value is a secret: it is never used as it is. The key is "key:"
// followed by the first 128 bits of its SHA-256 digest in unpadded base64url
// (22 characters), as httplimit.KeyByAPIKey makes it, so that no store or
// log holds the credential and a client that sends both HTTP and gRPC with
// one API key draws from one quota. A digest does not hide a guessable
// value: the API keys themselves must be random.
func KeyByMetadata(name string) KeyFunc {
	return func(ctx context.Context, _ string) (string, bool) {
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 || vs[0] == "" {
			return "", false
		}
		sum := sha256.Sum256([]byte(vs[0]))
		return "key:" + base64.RawURLEncoding.EncodeToString(sum[:16]), true
	}
}

// KeyWithMethod returns a KeyFunc that prefixes the key f finds with the
// full method and a space ("/pkg.Svc/Get ip:192.0.2.1"), so that one
// limiter gives each method a quota of its own per caller. A nil f means
// KeyByPeer.
func KeyWithMethod(f KeyFunc) KeyFunc {
	if f == nil {
		f = KeyByPeer
	}
	return func(ctx context.Context, fullMethod string) (string, bool) {
		k, ok := f(ctx, fullMethod)
		if !ok || k == "" {
			return "", false
		}
		return fullMethod + " " + k, true
	}
}
