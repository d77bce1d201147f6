package shard

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// FuzzSplit: any configuration split over any number of shards either is
// refused with floodgate.ErrInvalidConfig, or its parts are valid and sum
// exactly to it (every quota and rate), with periods and windows kept.
// It never panics.
func FuzzSplit(f *testing.F) {
	f.Add(uint8(0), int64(100), int64(time.Second), int64(100), 16)
	f.Add(uint8(1), int64(7), int64(time.Minute), int64(3), 2)
	f.Add(uint8(2), int64(1), int64(time.Hour), int64(0), 1024)
	f.Add(uint8(4), int64(1<<40), int64(time.Millisecond), int64(5), 3)
	f.Add(uint8(5), int64(17), int64(time.Second), int64(16), 16)
	f.Fuzz(func(t *testing.T, kind uint8, a, per, b int64, k int) {
		if k < 1 || k > MaxShards {
			k = 2 + int(uint(k)%MaxShards)%(MaxShards-1)
		}
		d := time.Duration(per)
		var alg floodgate.Algorithm
		switch kind % 6 {
		case 0:
			alg = floodgate.TokenBucket{Rate: a, Per: d, Burst: b}
		case 1:
			alg = floodgate.LeakyBucket{Rate: a, Per: d, Capacity: b}
		case 2:
			alg = floodgate.FixedWindow{Limit: a, Window: d}
		case 3:
			alg = floodgate.SlidingWindow{Limit: a, Window: d}
		case 4:
			alg = floodgate.SlidingLog{Limit: a, Window: d}
		default:
			alg = floodgate.Limits{floodgate.FixedWindow{Limit: a, Window: d}, floodgate.TokenBucket{Rate: b, Per: d, Burst: a}}
		}
		if alg.Validate() != nil {
			return // Bind refuses it before splitting
		}
		var sums [2]struct{ rate, quota int64 }
		for i := range k {
			p, err := split(alg, i, k)
			if err != nil {
				if !errors.Is(err, floodgate.ErrInvalidConfig) {
					t.Fatalf("split(%v, %d, %d): %v, not ErrInvalidConfig", alg, i, k, err)
				}
				return
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("split(%v, %d, %d) = %v, invalid: %v", alg, i, k, p, err)
			}
			ps := floodgate.Limits{p}
			if ls, ok := p.(floodgate.Limits); ok {
				ps = ls
			}
			for j, q := range ps {
				switch q := q.(type) {
				case floodgate.TokenBucket:
					sums[j].rate += q.Rate
					sums[j].quota += q.Burst
				case floodgate.LeakyBucket:
					sums[j].rate += q.Rate
					sums[j].quota += q.Capacity
				default:
					sums[j].quota += q.Policy().Quota
				}
			}
		}
		orig := floodgate.Limits{alg}
		if ls, ok := alg.(floodgate.Limits); ok {
			orig = ls
		}
		for j, q := range orig {
			want := struct{ rate, quota int64 }{quota: q.Policy().Quota}
			switch q := q.(type) {
			case floodgate.TokenBucket:
				want.rate = q.Rate
			case floodgate.LeakyBucket:
				want.rate = q.Rate
			}
			if sums[j] != want {
				t.Fatalf("%v over %d shards: limit %d's parts sum to %+v, want %+v", alg, k, j, sums[j], want)
			}
		}
	})
}
