package region

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalid is the error of unusable arguments: an allocation whose
// capacity or claims are negative, not finite, or whose floors exceed the
// capacity; a set of regions, a message, a reply or options that cannot be
// used. Errors returned wrap it with the details.
var ErrInvalid = errors.New("region: invalid argument")

// Claim is one claimant's demand on a capacity.
type Claim struct {
	// Want is the demand: at least 0 and finite.
	Want float64
	// Weight is the claimant's relative share when capacity is short: at
	// least 0 and finite; 0 means 1.
	Weight float64
	// Floor is guaranteed, up to Want, before the rest is shared: at least
	// 0 and finite.
	Floor float64
}

// check validates capacity and claims.
func check(capacity float64, claims []Claim) error {
	if !(capacity >= 0) || math.IsInf(capacity, 0) {
		return fmt.Errorf("%w: capacity %v is not a finite number ≥ 0", ErrInvalid, capacity)
	}
	floors := 0.0
	for i, c := range claims {
		for _, f := range []struct {
			name string
			v    float64
		}{{"Want", c.Want}, {"Weight", c.Weight}, {"Floor", c.Floor}} {
			if !(f.v >= 0) || math.IsInf(f.v, 0) {
				return fmt.Errorf("%w: claim %d: %s %v is not a finite number ≥ 0", ErrInvalid, i, f.name, f.v)
			}
		}
		floors += c.Floor
	}
	if floors > capacity {
		return fmt.Errorf("%w: floors add up to %v, above the capacity %v", ErrInvalid, floors, capacity)
	}
	return nil
}

// floored gives each claim min(Floor, Want) and returns the allocations,
// the capacity left, and the wants left.
func floored(capacity float64, claims []Claim) (got []float64, left float64, wants []float64) {
	got, wants = make([]float64, len(claims)), make([]float64, len(claims))
	left = capacity
	for i, c := range claims {
		got[i] = min(c.Floor, c.Want)
		wants[i] = c.Want - got[i]
		left -= got[i]
	}
	return got, max(left, 0), wants
}

func weight(c Claim) float64 {
	if c.Weight == 0 {
		return 1
	}
	return c.Weight
}

// FairShare divides capacity among claims by max-min fairness, weighted:
// after the floors, there is a water level L such that each claimant gets
// min(want, L·weight), and the shares add up to the capacity left, or to
// every want when they all fit. It returns an error matching ErrInvalid
// for an unusable capacity or claim. It is O(n log n).
func FairShare(capacity float64, claims []Claim) ([]float64, error) {
	if err := check(capacity, claims); err != nil {
		return nil, err
	}
	got, left, wants := floored(capacity, claims)
	// Visit claimants by want per unit of weight: each that the current
	// level would satisfy takes its want, and the level rises for the rest.
	order := make([]int, len(claims))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmpFloat(wants[a]/weight(claims[a]), wants[b]/weight(claims[b]))
	})
	weights := 0.0
	for _, c := range claims {
		weights += weight(c)
	}
	for k, i := range order {
		w := weight(claims[i])
		if level := left / weights; wants[i] <= level*w {
			got[i] += wants[i]
			left -= wants[i]
		} else {
			// Every claimant from here on wants more than the level: they
			// share what is left by weight.
			for _, j := range order[k:] {
				got[j] += left * weight(claims[j]) / weights
			}
			return got, nil
		}
		weights -= w
	}
	return got, nil
}

// ProportionalShare divides capacity among claims as YouTube Doorman's
// PROPORTIONAL_SHARE does, weighted: after the floors, each claimant gets
// up to its equal share of the capacity left (in proportion to its weight),
// and what the claimants who want less than theirs leave over goes to the
// others in proportion to how much more than their equal share they want.
// It returns an error matching ErrInvalid for an unusable capacity or
// claim. It is O(n).
func ProportionalShare(capacity float64, claims []Claim) ([]float64, error) {
	if err := check(capacity, claims); err != nil {
		return nil, err
	}
	got, left, wants := floored(capacity, claims)
	weights := 0.0
	for _, c := range claims {
		weights += weight(c)
	}
	total := 0.0
	for _, w := range wants {
		total += w
	}
	if total <= left {
		for i := range got {
			got[i] += wants[i]
		}
		return got, nil
	}
	excess, spare := make([]float64, len(claims)), left
	sumExcess := 0.0
	for i, c := range claims {
		equal := left * weight(c) / weights
		take := min(wants[i], equal)
		got[i] += take
		spare -= take
		excess[i] = wants[i] - take
		sumExcess += excess[i]
	}
	if sumExcess > 0 && spare > 0 {
		for i := range got {
			got[i] += spare * excess[i] / sumExcess
		}
	}
	return got, nil
}

// ToUnits turns shares of a whole capacity into whole units that add up to
// at most capacity: each share rounded down, then the units left over
// given one each to the largest remainders (ties to the lower index), but
// never above the share rounded up. shares must come from FairShare or
// ProportionalShare of the same capacity.
func ToUnits(capacity int64, shares []float64) []int64 {
	units := make([]int64, len(shares))
	var sum int64
	rest := make([]int, 0, len(shares))
	for i, s := range shares {
		units[i] = int64(math.Floor(s))
		sum += units[i]
		if float64(units[i]) < s {
			rest = append(rest, i)
		}
	}
	slices.SortStableFunc(rest, func(a, b int) int {
		return cmpFloat(shares[b]-math.Floor(shares[b]), shares[a]-math.Floor(shares[a]))
	})
	for _, i := range rest {
		if sum >= capacity {
			break
		}
		units[i]++
		sum++
	}
	// Shares that float error put a hair above their exact values can
	// round down to one unit too many in all: take units back, from the
	// last claimant that has one, until the sum fits.
	for i := len(units) - 1; sum > capacity && i >= 0; {
		if units[i] == 0 {
			i--
			continue
		}
		units[i]--
		sum--
	}
	return units
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
