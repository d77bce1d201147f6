package adaptive

import "math"

// Partition reserves a guaranteed share of a Limiter's limit for one class of
// traffic, with the semantics of Netflix concurrency-limits' partitioned
// limiter:
//
//   - while fewer requests are in flight than the limit L, any request is
//     admitted, whatever its partition (idle capacity is never wasted);
//   - once L requests are in flight, a request is still admitted if its
//     partition has fewer than ceil(L·Share) requests in flight.
//
// A partition under its guarantee is therefore admitted even when other
// partitions filled the limit, so the total in flight may exceed L by up to
// the sum of the guarantees; the adaptive limit sees the extra latency and
// adjusts. Requests with no known partition use only capacity left below L:
// they are the first to be shed.
type Partition struct {
	// Name identifies the partition in AcquirePartition, Middleware and
	// Stats. It must be non-empty and unique.
	Name string
	// Share is the guaranteed fraction of the limit, in [0, 1]. The shares
	// of all partitions must sum to at most 1.
	Share float64
}

// The criticality classes of the ordered mode (LimiterOptions.Criticality),
// from the most to the least important, after Google SRE's CRITICAL_PLUS >
// CRITICAL > SHEDDABLE_PLUS > SHEDDABLE ordering. Pass them as the partition
// name to AcquirePartition; any other name counts as ClassDefault.
const (
	ClassCritical   = "critical"
	ClassDefault    = "default"
	ClassSheddable  = "sheddable"
	ClassBackground = "background"
)

// CriticalityOptions turns on ordered-criticality shedding: each class may
// fill only a fraction of the limit L, smaller for less important classes,
// so that as load rises the least important class is shed first and
// ClassCritical keeps the last slots to itself. A request of class c is
// admitted while fewer than ceil(L·fraction(c)) requests of any class are in
// flight; ClassCritical's fraction is 1.
//
// A class alone on the server cannot fill the whole limit; an adaptive limit
// compensates by growing until latency says the server is full, a Fixed one
// does not. A zero field means its default; the fractions must satisfy
// 0 < Background <= Sheddable <= Default <= 1.
type CriticalityOptions struct {
	// Default is the fraction of the limit ClassDefault may fill. The default
	// is 0.8, which keeps 20% for critical traffic as Stripe's fleet load
	// shedder does.
	Default float64
	// Sheddable is the fraction of the limit ClassSheddable may fill. The
	// default is 0.6.
	Sheddable float64
	// Background is the fraction of the limit ClassBackground may fill. The
	// default is 0.4.
	Background float64
}

// partitionMode says how a Limiter admits requests once its limit is in use.
type partitionMode uint8

const (
	modePlain       partitionMode = iota // one pool, admit while inflight < L
	modePartitioned                      // guaranteed shares (Partition)
	modeOrdered                          // nested caps (CriticalityOptions)
)

// partition is the mutable state of one partition; the Limiter's mutex
// guards it.
type partition struct {
	name     string
	share    float64 // guaranteed share, or cap fraction in ordered mode
	limit    int     // ceil(L·share), recomputed when L changes
	busy     int     // requests of this partition in flight
	rejected uint64
}

// shareOf returns ceil(limit·share). The product is nudged down by a relative
// 1e-12 so that float error in, say, 10·0.3 cannot turn 3 into 4.
func shareOf(limit int, share float64) int {
	x := float64(limit) * share
	return int(math.Ceil(x - x*1e-12))
}

// buildPartitions validates the partition options and returns the partition
// table, the name index, the index used for unnamed or unknown traffic and
// the admission mode.
func buildPartitions(parts []Partition, crit *CriticalityOptions) ([]partition, map[string]int, int, partitionMode, error) {
	switch {
	case len(parts) > 0 && crit != nil:
		return nil, nil, 0, 0, invalid("LimiterOptions.Partitions and Criticality are exclusive")
	case crit != nil:
		c := *crit
		if c.Default == 0 {
			c.Default = 0.8
		}
		if c.Sheddable == 0 {
			c.Sheddable = 0.6
		}
		if c.Background == 0 {
			c.Background = 0.4
		}
		if !validRatio(c.Background, 0, 1) || !validRatio(c.Sheddable, c.Background, 1) || !validRatio(c.Default, c.Sheddable, 1) {
			return nil, nil, 0, 0, invalid("CriticalityOptions needs 0 < Background %v <= Sheddable %v <= Default %v <= 1",
				c.Background, c.Sheddable, c.Default)
		}
		table := []partition{
			{name: ClassCritical, share: 1},
			{name: ClassDefault, share: c.Default},
			{name: ClassSheddable, share: c.Sheddable},
			{name: ClassBackground, share: c.Background},
		}
		index := make(map[string]int, len(table))
		for i, p := range table {
			index[p.name] = i
		}
		return table, index, 1, modeOrdered, nil
	case len(parts) > 0:
		// Index 0 holds traffic with no known partition: a zero guarantee,
		// so it only ever uses capacity left below the limit.
		table := []partition{{}}
		index := make(map[string]int, len(parts))
		sum := 0.0
		for _, p := range parts {
			if p.Name == "" {
				return nil, nil, 0, 0, invalid("Partition with an empty name")
			}
			if _, dup := index[p.Name]; dup {
				return nil, nil, 0, 0, invalid("Partition %q listed twice", p.Name)
			}
			if !validRatio(p.Share, 0, 1) {
				return nil, nil, 0, 0, invalid("Partition %q Share %v not in [0, 1]", p.Name, p.Share)
			}
			sum += p.Share
			index[p.Name] = len(table)
			table = append(table, partition{name: p.Name, share: p.Share})
		}
		if sum > 1+1e-9 {
			return nil, nil, 0, 0, invalid("Partition shares sum to %v > 1", sum)
		}
		return table, index, 0, modePartitioned, nil
	default:
		return []partition{{}}, nil, 0, modePlain, nil
	}
}
