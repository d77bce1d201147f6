package httplimit

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
)

// maxLimits is the most limits a floodgate.Limits holds (its Validate
// refuses more), and so the size of the buffers that receive their
// decisions.
const maxLimits = 8

// plan is a limiter with the policies of its limits as the fields name
// them.
type plan struct {
	name string
	lim  *floodgate.Limiter
	// policies holds one policy per limit, in the order of the Limits;
	// one for a single algorithm.
	policies []headers.Policy
	// composite reports that lim runs a floodgate.Limits: it is decided
	// with Apply, which fills the Decision of each limit.
	composite bool
	// fields holds the text of policies, formatted once here rather than
	// on every response (issue 24: the fields were about 450 ns of a
	// 704 ns request). A decision whose Limit is not its policy's quota
	// (a store of the user's) is written all the same, by the general
	// path of the same writer.
	fields *headers.PolicySet
}

// newPlan validates lim and the names of its policies (nil: the
// defaults) and returns them as a plan.
func (m *middleware) newPlan(name string, lim *floodgate.Limiter, names []string) (*plan, error) {
	where := ""
	if name != "" {
		where = " (plan " + strconv.Quote(name) + ")"
	}
	if lim == nil {
		return nil, fmt.Errorf("%w: nil limiter%s", floodgate.ErrInvalidConfig, where)
	}
	alg := lim.Algorithm()
	if alg == nil {
		return nil, fmt.Errorf("%w: a Limiter not made by floodgate.New%s", floodgate.ErrInvalidConfig, where)
	}
	p := &plan{name: name, lim: lim}
	var pols []floodgate.Policy
	// floodgate.New holds a valid Limits as a value.
	ls, composite := alg.(floodgate.Limits)
	if composite {
		if len(ls) > maxLimits {
			// Unreachable while floodgate's bound is this package's.
			return nil, fmt.Errorf("%w%s: %d limits, at most %d", floodgate.ErrInvalidConfig, where, len(ls), maxLimits)
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
			return nil, fmt.Errorf("%w%s: %d policy names for %d limits", floodgate.ErrInvalidConfig, where, len(names), len(pols))
		}
		names = slices.Clone(names)
	case composite:
		names = defaultPolicyNames(pols)
	default:
		names = []string{DefaultPolicyName}
	}
	for i, pol := range pols {
		if names[i] == "" {
			return nil, fmt.Errorf("%w%s: empty policy name", floodgate.ErrInvalidConfig, where)
		}
		if slices.Contains(names[:i], names[i]) {
			return nil, fmt.Errorf("%w%s: two policies named %q", floodgate.ErrInvalidConfig, where, names[i])
		}
		hp := headers.Policy{Name: names[i], Quota: fieldCount(pol.Quota), Window: fieldDuration(pol.Window)}
		if _, err := headers.FormatPolicy(hp); err != nil {
			return nil, fmt.Errorf("%w%s: policy cannot be advertised: %w", floodgate.ErrInvalidConfig, where, err)
		}
		p.policies = append(p.policies, hp)
	}
	var err error
	if p.fields, err = headers.NewPolicySet(p.policies...); err != nil {
		// Unreachable: each policy was formatted above.
		return nil, fmt.Errorf("%w%s: policies cannot be advertised: %w", floodgate.ErrInvalidConfig, where, err)
	}
	return p, nil
}

// defaultPolicyNames names policies after their quota and window,
// "<quota>-per-<window>", and a name that repeats with "-2", "-3" and so
// on, so that every name differs and says what it limits.
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

// windowName writes d in the largest unit that divides it: "1d", "36h",
// "1m", "90s", "1500ms". Unlike time.Duration's String ("1m0s") it has one
// unit and no fraction.
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
