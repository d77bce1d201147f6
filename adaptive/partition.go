package adaptive

import (
	"math"
	"time"
)

// Partition reserves a guaranteed share of a Limiter's limit for one class of
// traffic. LimiterOptions.Partitions lists them in priority order, the most
// important first; requests with no known partition come after the last, with
// no guarantee. With L the limit and g = ceil(L·Share) a partition's
// guarantee, the default rule (PartitionBurst) admits a request of partition
// p when
//
//  1. fewer than L - R requests are in flight, where R is the room kept for
//     bursts of the partitions listed before p: the sum of their burst
//     allowances (below), each limited to the credit it has. For the first
//     partition R is 0, so idle capacity is never wasted; the partitions
//     after it stop borrowing short of L, so that its bursts find room
//     (trunk reservation, as telephone networks protect priority calls);
//  2. or p holds fewer than g - P requests, where P is the part of its
//     guarantee that bursts of the partitions listed before it hold, taken
//     from the last partitions first (preemption: requests in flight
//     finish, new ones wait until the burst ends). As in Netflix's rule, a
//     guarantee is kept even when the other partitions fill the limit, so
//     the total may exceed L; the adaptive limit sees the latency and
//     adjusts;
//  3. or p has burst credit, holds fewer than g + ceil(2·sqrt(g)) requests
//     (its burst allowance), and the partitions listed after it have
//     guaranteed slots left to give.
//
// Burst credit is the slot-time a partition left unused below its guarantee,
// counted in round trips of its requests (one slot for one round trip is one)
// and spent at the same rate by the slots it holds above its guarantee, up to
// 16 round trips of its whole allowance. A partition that keeps to its share
// on average therefore bursts above it; one that floods spends its credit
// within a few round trips, is held to its guarantee, and its excess no
// longer counts against the partitions after it, which keep theirs.
//
// Why bursts: every request waits in the server's one queue, so a partition
// offered exactly its share of the server's capacity holds, on average,
// exactly its guarantee in flight, and the Poisson spread of its demand
// (about sqrt(g) requests) lies above the guarantee half the time. The
// allowance is the square-root staffing rule (Halfin and Whitt): g +
// 2·sqrt(g) slots serve a Poisson demand of mean g with a loss well under 1%.
// Under the reference rule (PartitionReference) those bursts are shed
// whenever another partition fills the limit. In the simulator
// (adaptive/sim, Windowed(Vegas), worst of 40 seeds), a partition of Share
// 0.7 offered 0.7x of capacity while a partition of Share 0.3 floods up to
// 3x kept 78.81% of its requests at 100 workers and 72.72% at 20 under the
// reference rule, and keeps 98.44% and 96.25% under PartitionBurst. The
// price falls on the later partitions when an earlier one floods: with the
// 0.7 partition at 2x, the 0.3 partition gets 95.08% of its share of
// capacity at 100 workers and 87.91% at 20 (reference: 99.08% and 96.94%).
type Partition struct {
	// Name identifies the partition in AcquirePartition, Middleware and
	// Stats. It must be non-empty and unique.
	Name string
	// Share is the guaranteed fraction of the limit, in [0, 1]. The shares
	// of all partitions must sum to at most 1.
	Share float64
}

// PartitionRule says how LimiterOptions.Partitions share the limit once it is
// in use.
type PartitionRule uint8

const (
	// PartitionBurst, the default, is the rule described at Partition:
	// guarantees in priority order, with bursts above them taken from the
	// partitions listed later, and room kept for those bursts.
	PartitionBurst PartitionRule = iota
	// PartitionReference is the rule of Netflix concurrency-limits'
	// AbstractPartitionedLimiter: any request while fewer than L are in
	// flight, then only requests of partitions below their guarantee, with
	// no bursts above it; the order of the partitions does not matter. The
	// reference's test vectors hold for it.
	PartitionReference
)

// plainCritical is the index of ClassCritical in a Limiter without
// partitions.
const plainCritical = 1

// Constants of PartitionBurst (see Partition).
const (
	// burstSpread is z in the burst allowance ceil(z·sqrt(g)).
	burstSpread = 2
	// burstCredit is how many round trips of its whole allowance a
	// partition's credit holds.
	burstCredit = 16
)

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
	modePlain       partitionMode = iota // one pool, admit while inflight < L (ClassCritical: L + its burst)
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

	// PartitionBurst only.
	burst   int           // allowance above limit: ceil(burstSpread·sqrt(limit))
	credit  float64       // in round trips of one slot, [0, burstCredit·burst]
	accrued time.Duration // the instant credit was brought up to
	rtt     float64       // average RTT of the partition's requests, ns; 0 before the first
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
		// Index 0 holds every request but ClassCritical's, index
		// plainCritical those of ClassCritical, which may burst above the
		// limit (see LimiterOptions.Partitions).
		return []partition{{}, {name: ClassCritical}}, map[string]int{ClassCritical: plainCritical}, 0, modePlain, nil
	}
}

// The mechanics of PartitionBurst. Partitions are ranked by priority: index
// 1 to len-1 in the order of LimiterOptions.Partitions, then index 0, the
// traffic with no known partition. All of them run with l.mu held.

// rankIndex returns the index of the partition of rank r.
func (l *Limiter) rankIndex(r int) int {
	if r == len(l.parts)-1 {
		return 0
	}
	return r + 1
}

// accrue brings the burst credit of partition i up to now: the slots it held
// below (or above) its guarantee since the last time, in round trips of its
// requests. Its busy count and guarantee have not changed in between: every
// change calls accrue first.
func (l *Limiter) accrue(i int, now time.Duration) {
	q := &l.parts[i]
	dt := now - q.accrued
	if dt <= 0 {
		return
	}
	q.accrued = now
	if q.rtt > 0 {
		q.credit = clampFloat(q.credit+float64(q.limit-q.busy)*float64(dt)/q.rtt, 0, burstCredit*float64(q.burst))
	}
}

// bursting returns the slots partition q holds above its guarantee as a
// burst: within its allowance, and only while it has credit (a partition
// that borrowed idle capacity without credit takes nothing from the
// partitions after it).
func bursting(q *partition) int {
	if q.credit <= 0 {
		return 0
	}
	return min(q.burst, max(0, q.busy-q.limit))
}

// reserveAbove returns the room kept for bursts of the partitions ranked
// above partition p: the sum of the allowances of those with credit.
func (l *Limiter) reserveAbove(p int) int {
	r := 0
	for k := range len(l.parts) {
		i := l.rankIndex(k)
		if i == p {
			break
		}
		q := &l.parts[i]
		r += min(q.burst, int(math.Ceil(q.credit)))
	}
	return r
}

// preempted returns the guaranteed slots partition p gives up to the bursts
// of the partitions ranked above it, and the guaranteed slots the partitions
// ranked below it have left to give. Bursts take from the lowest-ranked
// partitions first.
func (l *Limiter) preempted(p int) (give, lowerLeft int) {
	total := 0
	for i := range l.parts {
		total += bursting(&l.parts[i])
	}
	// Walk up from the lowest rank: above is what the partitions ranked
	// above the current one burst, taken what those below it already gave.
	below, taken := 0, 0
	for r := len(l.parts) - 1; r >= 0; r-- {
		i := l.rankIndex(r)
		q := &l.parts[i]
		below += bursting(q)
		above := total - below
		g := min(max(0, above-taken), q.limit)
		if i == p {
			return g, lowerLeft
		}
		taken += g
		lowerLeft += q.limit - g
	}
	return 0, lowerLeft
}

// admitsBurst is admits for PartitionBurst (see Partition).
func (l *Limiter) admitsBurst(p int, now time.Duration) bool {
	if l.inflight < l.current-l.burstSum {
		return true // below every reserve: the common case, in O(1)
	}
	for i := range l.parts {
		l.accrue(i, now)
	}
	q := &l.parts[p]
	if l.inflight < l.current-l.reserveAbove(p) {
		return true
	}
	give, lowerLeft := l.preempted(p)
	if q.busy < q.limit-give {
		return true
	}
	return q.credit > 0 && q.busy < q.limit+q.burst && lowerLeft > 0
}
