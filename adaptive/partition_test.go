package adaptive

import (
	"testing"

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
	// AbstractPartitionedLimiterTest: FixedLimit 10 split 0.3/0.7.
	opts := func() *LimiterOptions {
		return &LimiterOptions{Partitions: []Partition{{Name: "batch", Share: 0.3}, {Name: "live", Share: 0.7}}}
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
