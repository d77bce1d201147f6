package adaptive

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/observe"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShareOf(t *testing.T) {
	for _, tc := range []struct {
		limit int
		share float64
		want  int
	}{
		{10, 0.3, 3}, {10, 0.7, 7}, {10, 0.1, 1}, {10, 0.31, 4}, {3, 1.0 / 3, 1}, {100, 0.07, 7},
		{1, 0.01, 1}, {20, 0, 0}, {20, 1, 20}, {1000, 0.29, 290}, {7, 0.5, 4},
	} {
		assert.Equalf(t, tc.want, shareOf(tc.limit, tc.share), "shareOf(%d, %v)", tc.limit, tc.share)
	}
}

func partitionLimits(l *Limiter) map[string]int {
	m := map[string]int{}
	for _, p := range l.Stats().Partitions {
		m[p.Name] = p.Limit
	}
	return m
}

func TestPartitionsGuarantee(t *testing.T) {
	for _, rule := range []PartitionRule{PartitionReference, PartitionBurst} {
		t.Run(fmt.Sprintf("rule=%d", rule), func(t *testing.T) { testPartitionsGuarantee(t, rule) })
	}
}

// testPartitionsGuarantee runs the vectors of Netflix's
// AbstractPartitionedLimiterTest. They are the reference rule's; they hold
// for PartitionBurst too because the clock never moves, so no partition
// earns burst credit and neither bursts nor reserves come into play.
func testPartitionsGuarantee(t *testing.T, rule PartitionRule) {
	// AbstractPartitionedLimiterTest: FixedLimit 10 split 0.3/0.7.
	opts := func() *LimiterOptions {
		clk := newFakeClock()
		return &LimiterOptions{Now: clk.Now, PartitionRule: rule, Partitions: []Partition{{Name: "batch", Share: 0.3}, {Name: "live", Share: 0.7}}}
	}
	t.Run("limits", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), opts())
		assert.Equal(t, map[string]int{"": 0, "batch": 3, "live": 7}, partitionLimits(l))
	})
	t.Run("batch fills the limit, live keeps its guarantee", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), opts())
		for range 10 {
			mustAcquire(t, l, "batch")
		}
		mustReject(t, l, "batch")
		mustReject(t, l, "")
		for range 7 {
			mustAcquire(t, l, "live")
		}
		mustReject(t, l, "live")
		assert.Equal(t, 17, l.InFlight(), "guarantees may take the total above the limit")
	})
	t.Run("live fills the limit, batch keeps its guarantee", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), opts())
		for range 10 {
			mustAcquire(t, l, "live")
		}
		mustReject(t, l, "live")
		for range 3 {
			mustAcquire(t, l, "batch")
		}
		mustReject(t, l, "batch")
		s := l.Stats()
		assert.Equal(t, []PartitionStats{
			{Name: "", Limit: 0},
			{Name: "batch", Limit: 3, InFlight: 3, Rejected: 1},
			{Name: "live", Limit: 7, InFlight: 10, Rejected: 1},
		}, s.Partitions)
	})
	t.Run("unknown traffic uses only excess capacity", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), opts())
		var unknown []Token
		for range 9 {
			unknown = append(unknown, mustAcquire(t, l, "nobody"))
		}
		mustAcquire(t, l, "")
		mustReject(t, l, "nobody")
		unknown[0].Success()
		mustAcquire(t, l, "nobody")
		mustAcquire(t, l, "live")
	})
	t.Run("guarantees follow the limit", func(t *testing.T) {
		rec := &recorder{limit: 10, script: []int{20}}
		l := newLimiter(t, rec, opts())
		tok := mustAcquire(t, l, "live")
		tok.Success()
		assert.Equal(t, map[string]int{"": 0, "batch": 6, "live": 14}, partitionLimits(l))
	})
}

func TestCriticalityOrder(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), &LimiterOptions{Criticality: &CriticalityOptions{}})
		assert.Equal(t, map[string]int{ClassCritical: 10, ClassDefault: 8, ClassSheddable: 6, ClassBackground: 4}, partitionLimits(l))
	})
	t.Run("lowest class shed first", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), &LimiterOptions{Criticality: &CriticalityOptions{}})
		for range 4 {
			mustAcquire(t, l, ClassBackground)
		}
		mustReject(t, l, ClassBackground)
		mustAcquire(t, l, ClassSheddable)
		mustAcquire(t, l, ClassSheddable)
		mustReject(t, l, ClassSheddable)
		mustReject(t, l, ClassBackground)
		mustAcquire(t, l, ClassDefault)
		mustAcquire(t, l, "") // no class: default
		mustReject(t, l, ClassDefault)
		mustReject(t, l, "unknown")
		mustAcquire(t, l, ClassCritical)
		mustAcquire(t, l, ClassCritical)
		for _, c := range []string{ClassCritical, ClassDefault, ClassSheddable, ClassBackground} {
			mustReject(t, l, c)
		}
		s := l.Stats()
		assert.Equal(t, []PartitionStats{
			{Name: ClassCritical, Limit: 10, InFlight: 2, Rejected: 1},
			{Name: ClassDefault, Limit: 8, InFlight: 2, Rejected: 3},
			{Name: ClassSheddable, Limit: 6, InFlight: 2, Rejected: 2},
			{Name: ClassBackground, Limit: 4, InFlight: 4, Rejected: 3},
		}, s.Partitions)
	})
	t.Run("custom fractions", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 10), &LimiterOptions{Criticality: &CriticalityOptions{Default: 1, Sheddable: 0.5, Background: 0.1}})
		assert.Equal(t, map[string]int{ClassCritical: 10, ClassDefault: 10, ClassSheddable: 5, ClassBackground: 1}, partitionLimits(l))
	})
	t.Run("Acquire is the default class", func(t *testing.T) {
		l := newLimiter(t, fixed(t, 5), &LimiterOptions{Criticality: &CriticalityOptions{}})
		for range 4 {
			_, err := l.Acquire(t.Context())
			require.NoError(t, err)
		}
		_, err := l.Acquire(t.Context())
		require.ErrorIs(t, err, ErrLimitExceeded)
	})
}

func TestCriticalBurstWithoutPartitions(t *testing.T) {
	// Without partitions every class counts alike against the limit, but
	// ClassCritical may go ceil(2·sqrt(L)) above it: 8 above a limit of 16.
	var got []observe.Reject
	l := newLimiter(t, fixed(t, 16), &LimiterOptions{Observer: &observe.Observer{OnReject: func(_ context.Context, r observe.Reject) { got = append(got, r) }}})
	for range 15 {
		mustAcquire(t, l, ClassSheddable)
	}
	mustAcquire(t, l, ClassCritical) // within the limit
	for _, c := range []string{"", ClassDefault, ClassSheddable, ClassBackground, "unknown"} {
		mustReject(t, l, c)
	}
	var burst []Token
	for range 8 {
		burst = append(burst, mustAcquire(t, l, ClassCritical))
	}
	mustReject(t, l, ClassCritical)
	assert.Equal(t, 1.5, l.Utilization(), "24 in flight over a limit of 16")
	s := l.Stats()
	assert.Equal(t, 24, s.InFlight)
	assert.Equal(t, uint64(6), s.Rejected)
	assert.Empty(t, s.Partitions, "a limiter without partitions reports none")
	assert.Equal(t, observe.Reject{Name: DefaultName, Partition: "", Limit: 16, InFlight: 16, Reason: "limit"}, got[0])
	assert.Equal(t, observe.Reject{Name: DefaultName, Partition: ClassCritical, Limit: 16, InFlight: 24, Reason: "limit"}, got[5])

	// The burst frees its slots like any other request; the others are
	// admitted again only below the limit.
	for _, tok := range burst {
		tok.Success()
	}
	mustReject(t, l, ClassDefault)
	_, err := l.Acquire(t.Context())
	require.ErrorIs(t, err, ErrLimitExceeded)

	small := newLimiter(t, fixed(t, 1), nil)
	mustAcquire(t, small, "")
	mustReject(t, small, "")
	mustAcquire(t, small, ClassCritical) // ceil(2·sqrt(1)) = 2 above the limit
	mustAcquire(t, small, ClassCritical)
	mustReject(t, small, ClassCritical)
}

// burstLimiter returns a limiter of Fixed(10) with the partitions critical
// (Share 0.7: guarantee 7, burst allowance ceil(2·sqrt(7)) = 6) and
// sheddable (0.3: guarantee 3, allowance 4) on clk, under rule.
func burstLimiter(t *testing.T, clk *fakeClock, rule PartitionRule) *Limiter {
	t.Helper()
	return newLimiter(t, fixed(t, 10), &LimiterOptions{Now: clk.Now, PartitionRule: rule,
		Partitions: []Partition{{Name: "critical", Share: 0.7}, {Name: "sheddable", Share: 0.3}}})
}

// acquireAll acquires tokens of partition p until one is rejected and
// returns them.
func acquireAll(t *testing.T, l *Limiter, p string) []Token {
	t.Helper()
	var toks []Token
	for {
		tok, err := l.AcquirePartition(context.Background(), p)
		if err != nil {
			require.ErrorIs(t, err, ErrLimitExceeded)
			return toks
		}
		toks = append(toks, tok)
		require.Less(t, len(toks), 100, "partition %q never rejected", p)
	}
}

// creditOf returns partition i's burst credit brought up to the clock.
func creditOf(l *Limiter, i int) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accrue(i, l.clock())
	return l.parts[i].credit
}

// warm gives partition p of l a round trip of 10ms, so that it earns credit
// from then on, and lets 200ms pass with nothing in flight: for a guarantee
// of g, 20·g round trips of credit, more than the cap of 16 round trips of
// the allowance when g >= 3.
func warm(t *testing.T, l *Limiter, clk *fakeClock, p string) {
	t.Helper()
	tok := mustAcquire(t, l, p)
	clk.Advance(10 * ms)
	tok.Success()
	clk.Advance(200 * ms)
}

func TestPartitionBurst(t *testing.T) {
	t.Run("a critical burst takes the sheddable guarantee", func(t *testing.T) {
		clk := newFakeClock()
		l := burstLimiter(t, clk, PartitionBurst)
		warm(t, l, clk, "critical") // credit: 7 slots · 20 round trips, capped at 16·6
		assert.Equal(t, float64(16*6), creditOf(l, 1))
		// The sheddable partition borrows idle capacity only below
		// L - 6, the room kept for the critical allowance.
		shed := acquireAll(t, l, "sheddable")
		assert.Len(t, shed, 4)
		// The critical partition fills the limit, then its guarantee (7),
		// then bursts by the sheddable guarantee (3): 10 in flight, 14 in
		// all.
		crit := acquireAll(t, l, "critical")
		assert.Len(t, crit, 10)
		assert.Equal(t, 14, l.InFlight())
		// Sheddable requests that end are not replaced while the burst
		// holds its guarantee.
		shed[0].Success()
		shed[1].Success()
		mustReject(t, l, "sheddable")
		// As the burst ends, the sheddable guarantee comes back: 2 in
		// flight, below 3.
		for _, tok := range crit[7:] {
			tok.Success()
		}
		mustAcquire(t, l, "sheddable")
		mustReject(t, l, "sheddable")
	})

	t.Run("the reference sheds the burst", func(t *testing.T) {
		clk := newFakeClock()
		l := burstLimiter(t, clk, PartitionReference)
		warm(t, l, clk, "critical")
		assert.Len(t, acquireAll(t, l, "sheddable"), 10, "borrows all idle capacity")
		assert.Len(t, acquireAll(t, l, "critical"), 7, "its guarantee, no more")
	})

	t.Run("a flood spends its credit and keeps to its guarantee", func(t *testing.T) {
		clk := newFakeClock()
		l := burstLimiter(t, clk, PartitionBurst)
		warm(t, l, clk, "critical")
		// The critical partition takes the whole limit; with credit, the 3
		// above its guarantee are a burst that holds the whole sheddable
		// guarantee, so nothing more is admitted.
		crit := acquireAll(t, l, "critical")
		require.Len(t, crit, 10)
		assert.Empty(t, acquireAll(t, l, "sheddable"), "preempted by the burst")
		// Held 3 over the guarantee, 96 round trips of credit last 32
		// round trips of 10ms.
		clk.Advance(319 * ms)
		assert.Positive(t, creditOf(l, 1))
		assert.Empty(t, acquireAll(t, l, "sheddable"))
		clk.Advance(2 * ms)
		assert.Zero(t, creditOf(l, 1))
		// Out of credit, the critical excess no longer counts against the
		// sheddable guarantee, and the critical partition is held to its
		// own: the sheddable partition gets its 3, beyond the limit as
		// under Netflix's rule.
		assert.Len(t, acquireAll(t, l, "sheddable"), 3)
		crit[0].Success()
		mustReject(t, l, "critical")
	})

	t.Run("without a round trip no credit", func(t *testing.T) {
		clk := newFakeClock()
		l := burstLimiter(t, clk, PartitionBurst)
		clk.Advance(time.Second)
		assert.Len(t, acquireAll(t, l, "critical"), 10, "the limit only: no RTT yet, so no credit")
	})

	t.Run("credit follows the guarantee", func(t *testing.T) {
		// The limit rises from 10 to 20: critical's guarantee becomes 14
		// and its allowance 8, so its credit may grow to 16·8.
		clk := newFakeClock()
		rec := &recorder{limit: 10, script: []int{10, 20}}
		l := newLimiter(t, rec, &LimiterOptions{Now: clk.Now, Partitions: []Partition{{Name: "critical", Share: 0.7}}})
		warm(t, l, clk, "critical")
		assert.Equal(t, float64(16*6), creditOf(l, 1))
		tok := mustAcquire(t, l, "critical")
		tok.Success()
		assert.Equal(t, 20, l.Limit())
		assert.Equal(t, []int{14, 8}, []int{l.parts[1].limit, l.parts[1].burst})
		clk.Advance(time.Second)
		assert.Equal(t, float64(16*8), creditOf(l, 1))
	})

	t.Run("a clock that steps back earns nothing", func(t *testing.T) {
		clk := newFakeClock()
		l := burstLimiter(t, clk, PartitionBurst)
		warm(t, l, clk, "critical")
		c := creditOf(l, 1)
		clk.Advance(-time.Second)
		assert.Equal(t, c, creditOf(l, 1))
		clk.Advance(time.Second)
		assert.Equal(t, c, creditOf(l, 1), "nothing for the time already counted")
	})

	t.Run("no allocations", func(t *testing.T) {
		clk := newFakeClock()
		l := burstLimiter(t, clk, PartitionBurst)
		warm(t, l, clk, "critical")
		acquireAll(t, l, "sheddable")
		held := acquireAll(t, l, "critical")
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			// At the limit: the saturated path with its walks over the
			// partitions.
			_, _ = l.AcquirePartition(ctx, "critical")
			_, _ = l.AcquirePartition(ctx, "sheddable")
			held[0].Success()
			var err error
			if held[0], err = l.AcquirePartition(ctx, "critical"); err != nil {
				panic(err)
			}
		})
		assert.Zero(t, allocs)
	})
}

func TestPartitionBurstPriority(t *testing.T) {
	// Three partitions: a burst of the first takes the last one's guarantee
	// first, then the middle one's.
	clk := newFakeClock()
	l := newLimiter(t, fixed(t, 20), &LimiterOptions{Now: clk.Now, Partitions: []Partition{
		{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25},
	}})
	warm(t, l, clk, "a") // a: guarantee 10, allowance ceil(2·sqrt(10)) = 7
	for range 5 {
		mustAcquire(t, l, "b")
		mustAcquire(t, l, "c")
	}
	// 10 in flight: a fills the limit (10), then bursts by 7.
	assert.Len(t, acquireAll(t, l, "a"), 17)
	give, _ := l.preempted(3)
	assert.Equal(t, 5, give, "c gives its whole guarantee first")
	give, _ = l.preempted(2)
	assert.Equal(t, 2, give, "then b")
	mustReject(t, l, "c")
	mustReject(t, l, "b")
}
