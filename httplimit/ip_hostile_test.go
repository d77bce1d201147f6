package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/httplimit"
)

// hostileField is a forwarding field an attacker behind a trusted proxy
// sends to make the address resolution expensive.
type hostileField struct {
	name  string
	opts  *httplimit.IPKeyOptions
	lines func(size int) []string // the field's lines, in order, about size bytes in all
	want  string                  // the client address ClientIP finds
}

// fill returns one line of unit repeated to about size bytes, followed by
// tail.
func fill(unit, tail string) func(int) []string {
	return func(size int) []string { return []string{strings.Repeat(unit, size/len(unit)) + tail} }
}

// lines returns about size bytes of lines that each hold unit.
func lines(unit string) func(int) []string {
	return func(size int) []string {
		l := make([]string, size/len(unit))
		for i := range l {
			l[i] = unit
		}
		return l
	}
}

// hostileFields are the fields of the tests below. The trusted peer is
// 10.0.0.1; the proxy's own entry, where there is one, is 203.0.113.9.
var hostileFields = func() []hostileField {
	xff := &httplimit.IPKeyOptions{TrustedProxies: proxies}
	fwd := &httplimit.IPKeyOptions{TrustedProxies: proxies, ForwardedHeader: "Forwarded"}
	return []hostileField{
		{"xff commas", xff, fill(",", ""), "10.0.0.1"},
		{"xff commas then the proxy's entry", xff, fill(",", " 203.0.113.9"), "203.0.113.9"},
		{"xff 1.1.1.1, repeated", xff, fill("1.1.1.1,", ""), "10.0.0.1"},
		{"xff 1.1.1.1, repeated then the proxy's entry", xff, fill("1.1.1.1, ", "203.0.113.9"), "203.0.113.9"},
		// Every hop trusted: the walk goes as deep as it is allowed to.
		{"xff trusted addresses repeated", xff, fill("10.0.0.2, ", "10.0.0.3"), "10.0.0.2"},
		{"xff one element without separators", xff, fill("1", ""), "10.0.0.1"},
		// An element longer than the walk reads is malformed, however
		// it ends.
		{"xff spaces then the proxy's entry", xff, fill(" ", "203.0.113.9"), "10.0.0.1"},
		{"xff many lines of a trusted address", xff, lines("10.0.0.2"), "10.0.0.2"},
		{"xff many empty lines", xff, lines(" "), "10.0.0.1"},
		{"forwarded semicolons", fwd, fill(";", ""), "10.0.0.1"},
		{"forwarded commas", fwd, fill(",", ""), "10.0.0.1"},
		{"forwarded for=1.1.1.1; repeated", fwd, fill("for=1.1.1.1;", ""), "10.0.0.1"},
		{"forwarded for=1.1.1.1, repeated then the proxy's element", fwd, fill("for=1.1.1.1, ", "for=203.0.113.9"), "203.0.113.9"},
		{"forwarded for=10.0.0.2, repeated", fwd, fill("for=10.0.0.2, ", "for=10.0.0.3"), "10.0.0.2"},
		{"forwarded ;proto=http repeated in one element", fwd, func(size int) []string {
			return []string{"for=203.0.113.9" + strings.Repeat(";proto=http", size/11)}
		}, "10.0.0.1"},
		{"forwarded many lines of a trusted element", fwd, lines("for=10.0.0.2"), "10.0.0.2"},
	}
}()

// request returns a request from the trusted peer 10.0.0.1 with h's field
// of about size bytes.
func (h hostileField) request(size int) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.0.0.1:1234"
	req.Header[headerOf(h.opts)] = h.lines(size)
	return req
}

// bytesPerRun returns the bytes f allocates per call, averaged over runs
// calls, as testing.AllocsPerRun counts allocations.
func bytesPerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f() // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}

// The bars of a hostile field from a trusted proxy, whatever its size:
// the key and at most one failed parse (the walk ends at the first), and
// a few bytes, not a multiple of the field.
const (
	hostileMaxAllocs = 2
	hostileMaxBytes  = 4096
)

// TestKeyByIPHostileFields checks that a 1 MiB forwarding field costs
// KeyByIP as little as a short one: O(1) allocations, and at most 4 bytes
// allocated per byte of the field (in fact a constant). Time is only
// logged: the machines tests run on are shared.
func TestKeyByIPHostileFields(t *testing.T) {
	for _, h := range hostileFields {
		t.Run(h.name, func(t *testing.T) {
			req := h.request(1 << 20)
			size := fieldLen(req.Header.Values(headerOf(h.opts)))
			got, ok := httplimit.ClientIP(req, h.opts)
			require.True(t, ok)
			assert.Equal(t, netip.MustParseAddr(h.want), got, "ClientIP")

			key := httplimit.KeyByIP(h.opts)
			call := func() { _, _ = key(req) }
			allocs := testing.AllocsPerRun(20, call)
			bytes := bytesPerRun(20, call)
			start := time.Now()
			const timed = 20
			for range timed {
				call()
			}
			t.Logf("%d-byte field: %.0f allocs, %.0f B, %v per KeyByIP", size, allocs, bytes, time.Since(start)/timed)
			assert.LessOrEqual(t, allocs, float64(hostileMaxAllocs), "allocations per KeyByIP")
			assert.LessOrEqual(t, bytes, 4*float64(size), "bytes allocated per KeyByIP, against 4 per field byte")
			assert.LessOrEqual(t, bytes, float64(hostileMaxBytes), "bytes allocated per KeyByIP")
		})
	}
}

// TestKeyByIPHostileFieldsScale checks that the cost of a hostile field
// does not grow with its size: a 4 MiB field allocates as a 16 KiB one
// does. (The bytes the walk examines are counted in ip_walk_test.go.)
func TestKeyByIPHostileFieldsScale(t *testing.T) {
	for _, h := range hostileFields {
		t.Run(h.name, func(t *testing.T) {
			measure := func(size int) (allocs, bytes float64) {
				req := h.request(size)
				key := httplimit.KeyByIP(h.opts)
				call := func() { _, _ = key(req) }
				return testing.AllocsPerRun(5, call), bytesPerRun(5, call)
			}
			allocsSmall, bytesSmall := measure(16 << 10)
			allocsLarge, bytesLarge := measure(4 << 20)
			t.Logf("16 KiB: %.0f allocs, %.0f B; 4 MiB: %.0f allocs, %.0f B", allocsSmall, bytesSmall, allocsLarge, bytesLarge)
			assert.Equal(t, allocsSmall, allocsLarge, "allocations per KeyByIP, 16 KiB field against 4 MiB")
			assert.LessOrEqual(t, bytesLarge, bytesSmall+64, "bytes per KeyByIP, 4 MiB field against 16 KiB")
		})
	}
}

func headerOf(opts *httplimit.IPKeyOptions) string {
	if opts.ForwardedHeader != "" {
		return opts.ForwardedHeader
	}
	return "X-Forwarded-For"
}

func fieldLen(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}
