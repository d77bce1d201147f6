package floodgate

import (
	"fmt"
	"strings"
)

// Limits is several limits on one key decided as one: "10 per second and
// 1,000 per day". A request is admitted only if every limit admits it, and
// a denial changes no limit's state; on Redis the decision is one script
// call (the limits' keys share the user key's hash tag, so a Cluster
// holds them on one slot), on memstore one critical section.
//
//	lim, err := floodgate.New(store, floodgate.Limits{
//		floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10},
//		floodgate.SlidingWindow{Limit: 1000, Window: 24 * time.Hour},
//	}, nil)
//
// The Decision of a composite reports the limit that bound (its index is
// Decision.Binding): on a denial, the denying limit with the longest
// RetryAfter, which is when the request would be admitted; on an
// admission, the limit with the fewest units left. Limiter.Apply's each
// argument receives every limit's own Decision. Policy reports the limit
// with the smallest quota, so that n above it is ErrExceedsLimit.
//
// Reserve and Wait admit the units once every limit can: Delay is the
// longest of the limits' delays, and every limit counts the units at the
// instant they proceed (now plus Delay), so that none lends capacity it
// would have restored by then. With a Delay, each limit's Remaining and
// ResetAfter are as of that instant (ResetAfter still measured from now).
// OpTakeUpTo admits the fewest units any limit has; OpSettle settles
// every limit, and Result.Granted is the fewest units any of them
// settled.
//
// State: the i-th limit of a kind in a Limits (counted from 0 among the
// limits of that kind) keeps its state under (name, key, kind, i), shared
// by every Limits bound to the store under the same name, and apart from
// the state of single algorithms. A key that moves between two Limits of
// one name (a plan change: name the plans' limiters alike) therefore
// keeps what the limits of a kind they share have counted, in order; a
// limit of a kind the new Limits does not have starts from a new key's
// state. Under derived names (Options.Name empty) two different Limits
// share nothing.
//
// A Limits holds 1 to 8 limits, each one of the five algorithms'
// configurations (a CalendarWindow is of a kind of its own), not another
// Limits. The zero value is not usable.
type Limits []Algorithm

// maxLimits is the most limits a Limits may hold: enough for every policy
// seen in practice (per second, minute, hour, day, month), and a bound on
// the work of one decision.
const maxLimits = 8

var _ Algorithm = Limits{}

// Validate reports whether every limit is usable; errors match
// ErrInvalidConfig.
func (ls Limits) Validate() error {
	if len(ls) == 0 || len(ls) > maxLimits {
		return fmt.Errorf("%w: Limits holds %d limits, want 1 to %d", ErrInvalidConfig, len(ls), maxLimits)
	}
	for i, a := range ls {
		switch a := a.(type) {
		case nil:
			return fmt.Errorf("%w: Limits[%d] is nil", ErrInvalidConfig, i)
		case Limits, *Limits:
			return fmt.Errorf("%w: Limits[%d] is a Limits; list its limits instead", ErrInvalidConfig, i)
		default:
			if err := validate(a); err != nil {
				return fmt.Errorf("floodgate: limit %d of the Limits: %w", i, err)
			}
			if d, _ := derefAlgorithm(a); isSubWindowed(d) {
				// Not built yet: neither store's Limits steps keep a
				// sub-window state.
				return fmt.Errorf("%w: Limits[%d] is a SlidingWindow with sub-windows, which a Limits cannot hold yet", ErrInvalidConfig, i)
			}
		}
	}
	return nil
}

// isSubWindowed reports whether a is a SlidingWindow with sub-windows.
func isSubWindowed(a Algorithm) bool {
	sw, ok := a.(SlidingWindow)
	return ok && sw.SubWindows >= 2
}

// validate calls a.Validate, which panics for a nil pointer to a
// configuration.
func validate(a Algorithm) error {
	a, err := derefAlgorithm(a)
	if err != nil {
		return err
	}
	return a.Validate()
}

// Policy returns the policy of the limit with the smallest quota (the
// first of them); see Limits. It is the zero Policy for an invalid Limits.
func (ls Limits) Policy() Policy {
	if len(ls) == 0 || len(ls) > maxLimits {
		return Policy{}
	}
	var p Policy
	for i, a := range ls {
		switch a.(type) {
		case TokenBucket, LeakyBucket, FixedWindow, CalendarWindow, SlidingWindow, SlidingLog:
		default:
			// nil, a pointer (nil or not) or a nested Limits: Validate
			// says which.
			if ls.Validate() != nil {
				return Policy{}
			}
		}
		q := a.Policy()
		if q.Quota == 0 {
			return Policy{} // an invalid limit
		}
		if i == 0 || q.Quota < p.Quota {
			p = q
		}
	}
	return p
}

func (Limits) algorithm() {}

// String describes the limits, e.g. "Limits{TokenBucket{10 per 1s, burst
// 10}, SlidingWindow{1000 per 24h0m0s}}".
func (ls Limits) String() string {
	var b strings.Builder
	b.WriteString("Limits{")
	for i, a := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, a)
	}
	b.WriteString("}")
	return b.String()
}

// derefLimits returns ls with every limit as a value, in a new slice, so
// that a Limiter keeps its configuration whatever the caller does with
// the slice afterwards.
func derefLimits(ls Limits) (Limits, error) {
	out := make(Limits, len(ls))
	for i, a := range ls {
		switch a.(type) {
		case Limits, *Limits:
			return nil, fmt.Errorf("%w: Limits[%d] is a Limits; list its limits instead", ErrInvalidConfig, i)
		}
		v, err := derefAlgorithm(a)
		if err != nil {
			return nil, fmt.Errorf("floodgate: limit %d of the Limits: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}
