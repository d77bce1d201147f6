package grpclimit

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"google.golang.org/grpc/metadata"
)

// The response metadata names of the IETF fields: gRPC metadata names are
// lower case (HTTP/2 sends every field name in lower case).
const (
	MetadataRateLimitPolicy = "ratelimit-policy"
	MetadataRateLimit       = "ratelimit"
	// MetadataRetryPushback is the trailer gRPC's own retry policy reads
	// (gRFC A6): the milliseconds to wait before the next attempt.
	MetadataRetryPushback = "grpc-retry-pushback-ms"
)

// DefaultPolicyName is the name of a single algorithm's policy in the
// ratelimit fields unless Options.PolicyNames names it, as in httplimit.
const DefaultPolicyName = "default"

// maxLimits is the most limits a floodgate.Limits holds (its Validate
// refuses more), and so the size of the buffers that receive their
// decisions.
const maxLimits = 8

// policies is a limiter's policies as the fields name them, formatted once.
type policies struct {
	// list holds one policy per limit, in the order of the Limits; one for
	// a single algorithm.
	list []headers.Policy
	// composite reports that the limiter runs a floodgate.Limits, decided
	// with Apply so that every limit's Decision is known.
	composite bool
	// set holds the text of list, formatted once.
	set *headers.PolicySet
	// hdrs is a pool of http.Header that headers.PolicySet.WriteReports
	// writes into: the fields are then moved to gRPC metadata, whose
	// values WriteReports allocated for this call alone.
	hdrs sync.Pool
}

// newPolicies validates lim and the names of its policies (nil: the
// defaults) and formats them. Its errors match floodgate.ErrInvalidConfig.
func newPolicies(lim *floodgate.Limiter, names []string) (*policies, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: nil limiter", floodgate.ErrInvalidConfig)
	}
	alg := lim.Algorithm()
	if alg == nil {
		return nil, fmt.Errorf("%w: a Limiter not made by floodgate.New", floodgate.ErrInvalidConfig)
	}
	p := &policies{}
	p.hdrs.New = func() any { return make(http.Header, 2) }
	var pols []floodgate.Policy
	ls, composite := alg.(floodgate.Limits) // floodgate.New holds a valid Limits as a value
	if composite {
		if len(ls) > maxLimits {
			// Unreachable while floodgate's bound is this package's.
			return nil, fmt.Errorf("%w: %d limits, at most %d", floodgate.ErrInvalidConfig, len(ls), maxLimits)
		}
		for _, a := range ls {
			pols = append(pols, a.Policy())
		}
	} else {
		pols = []floodgate.Policy{lim.Policy()}
	}
	p.composite = composite
	switch {
	case names != nil:
		if len(names) != len(pols) {
			return nil, fmt.Errorf("%w: %d policy names for %d limits", floodgate.ErrInvalidConfig, len(names), len(pols))
		}
		names = slices.Clone(names)
	case composite:
		names = defaultPolicyNames(pols)
	default:
		names = []string{DefaultPolicyName}
	}
	for i, pol := range pols {
		if names[i] == "" {
			return nil, fmt.Errorf("%w: empty policy name", floodgate.ErrInvalidConfig)
		}
		if slices.Contains(names[:i], names[i]) {
			return nil, fmt.Errorf("%w: two policies named %q", floodgate.ErrInvalidConfig, names[i])
		}
		hp := headers.Policy{Name: names[i], Quota: fieldCount(pol.Quota), Window: fieldDuration(pol.Window)}
		if _, err := headers.FormatPolicy(hp); err != nil {
			return nil, fmt.Errorf("%w: policy cannot be advertised: %w", floodgate.ErrInvalidConfig, err)
		}
		p.list = append(p.list, hp)
	}
	var err error
	if p.set, err = headers.NewPolicySet(p.list...); err != nil {
		// Unreachable: each policy was formatted above.
		return nil, fmt.Errorf("%w: policies cannot be advertised: %w", floodgate.ErrInvalidConfig, err)
	}
	return p, nil
}

// reports fills reps with the reports of d and returns how many it filled:
// for a Limits, the binding limit's (d) first, then every other limit's from
// each in the order of the Limits; the binding one alone when each was not
// filled. This is httplimit's rule, so that both protocols send the same
// fields for the same decisions.
func (p *policies) reports(reps *[maxLimits]headers.Report, d floodgate.Decision, each []floodgate.Decision) int {
	b := d.Binding
	if !p.composite || b < 0 || b >= len(p.list) {
		b = 0
	}
	reps[0] = report(p.list[b], d)
	if !p.composite {
		return 1
	}
	for i := range each {
		if each[i].Limit <= 0 {
			return 1 // not filled: every limit's quota is at least 1
		}
	}
	n := 1
	for i := range each {
		if i != b {
			reps[n] = report(p.list[i], each[i])
			n++
		}
	}
	return n
}

// metadata returns the ratelimit-policy and ratelimit fields of reps as
// response metadata, formatted by headers.PolicySet as httplimit formats
// them (the same bytes as its HTTP fields). The metadata and its values
// are the call's own.
func (p *policies) metadata(reps []headers.Report) metadata.MD {
	h := p.hdrs.Get().(http.Header)
	// The reports are in range (report clamps them) and the names were
	// checked by newPolicies, so WriteReports cannot fail.
	_ = p.set.WriteReports(h, headers.StyleIETF, reps, nil)
	md := metadata.MD{
		MetadataRateLimitPolicy: h[canonRateLimitPolicy],
		MetadataRateLimit:       h[canonRateLimit],
	}
	p.hdrs.Put(h)
	return md
}

// The names under which WriteReports sets the fields: http.Header's
// canonical forms of headers.FieldRateLimitPolicy and FieldRateLimit.
var (
	canonRateLimitPolicy = http.CanonicalHeaderKey(headers.FieldRateLimitPolicy)
	canonRateLimit       = http.CanonicalHeaderKey(headers.FieldRateLimit)
)

// report converts a decision of the limit whose policy is pol into the
// terms of package headers, in the range the fields carry.
func report(pol headers.Policy, d floodgate.Decision) headers.Report {
	if d.Limit > 0 {
		pol.Quota = fieldCount(d.Limit)
	}
	return headers.Report{
		Policy:     pol,
		Remaining:  fieldCount(d.Remaining),
		ResetAfter: fieldDuration(d.ResetAfter),
		Denied:     !d.Allowed,
		RetryAfter: fieldDuration(d.RetryAfter),
	}
}

// fieldCount returns n in the range of the fields' integers: a count above
// headers.MaxInteger is sent as headers.MaxInteger, which tells a client
// less than it may use, never more.
func fieldCount(n int64) int64 {
	return min(max(n, 0), headers.MaxInteger)
}

// maxFieldDuration is the longest duration the fields carry: whole seconds
// that a time.Duration read back from them still holds.
const maxFieldDuration = math.MaxInt64 / time.Second * time.Second

// fieldDuration returns d in the range of the fields' seconds.
func fieldDuration(d time.Duration) time.Duration {
	return min(max(d, 0), maxFieldDuration)
}

// defaultPolicyNames names policies after their quota and window,
// "<quota>-per-<window>", and a name that repeats with "-2", "-3" and so
// on, as httplimit names them.
func defaultPolicyNames(pols []floodgate.Policy) []string {
	names := make([]string, len(pols))
	for i, p := range pols {
		base := strconv.FormatInt(p.Quota, 10) + "-per-" + windowName(p.Window)
		names[i] = base
		for k := 2; slices.Contains(names[:i], names[i]); k++ {
			names[i] = base + "-" + strconv.Itoa(k)
		}
	}
	return names
}

// windowName writes d in the largest unit that divides it: "1d", "1m",
// "90s", "1500ms".
func windowName(d time.Duration) string {
	units := []struct {
		d    time.Duration
		name string
	}{
		{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"},
		{time.Millisecond, "ms"}, {time.Microsecond, "us"},
	}
	for _, u := range units {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}
