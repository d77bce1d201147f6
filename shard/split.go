package shard

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// part returns shard i's part of q units split over k shards: ⌊q/k⌋, plus
// one on the first q mod k shards. The parts sum to q.
func part(q int64, i, k int) int64 {
	p := q / int64(k)
	if int64(i) < q%int64(k) {
		p++
	}
	return p
}

// split returns shard i's configuration of alg (a value, validated) over k
// shards: every quota and rate split by part, every period and window
// kept, so that the shards' bounds sum to alg's. It returns an error
// matching floodgate.ErrInvalidConfig when a part is not a usable
// configuration: a quota or rate smaller than k, or a token or leaky
// bucket whose split burst and rate restore more slowly than MaxWindow
// allows.
func split(alg floodgate.Algorithm, i, k int) (floodgate.Algorithm, error) {
	var out floodgate.Algorithm
	switch a := alg.(type) {
	case *floodgate.TokenBucket, *floodgate.LeakyBucket, *floodgate.FixedWindow, *floodgate.CalendarWindow, *floodgate.SlidingWindow, *floodgate.SlidingLog, *floodgate.Limits:
		v, err := deref(a)
		if err != nil {
			return nil, err
		}
		return split(v, i, k)
	case floodgate.TokenBucket:
		if a.Rate < int64(k) || a.Burst < int64(k) {
			return nil, fmt.Errorf("%w: shard: %v over %d shards: Rate and Burst must be at least %d", floodgate.ErrInvalidConfig, a, k, k)
		}
		out = floodgate.TokenBucket{Rate: part(a.Rate, i, k), Per: a.Per, Burst: part(a.Burst, i, k)}
	case floodgate.LeakyBucket:
		if a.Rate < int64(k) || a.Capacity < int64(k) {
			return nil, fmt.Errorf("%w: shard: %v over %d shards: Rate and Capacity must be at least %d", floodgate.ErrInvalidConfig, a, k, k)
		}
		out = floodgate.LeakyBucket{Rate: part(a.Rate, i, k), Per: a.Per, Capacity: part(a.Capacity, i, k)}
	case floodgate.FixedWindow:
		if a.Limit < int64(k) {
			return nil, fmt.Errorf("%w: shard: %v over %d shards: Limit must be at least %d", floodgate.ErrInvalidConfig, a, k, k)
		}
		out = floodgate.FixedWindow{Limit: part(a.Limit, i, k), Window: a.Window}
	case floodgate.CalendarWindow:
		if a.Limit < int64(k) {
			return nil, fmt.Errorf("%w: shard: %v over %d shards: Limit must be at least %d", floodgate.ErrInvalidConfig, a, k, k)
		}
		a.Limit = part(a.Limit, i, k)
		out = a
	case floodgate.SlidingWindow:
		if a.Limit < int64(k) {
			return nil, fmt.Errorf("%w: shard: %v over %d shards: Limit must be at least %d", floodgate.ErrInvalidConfig, a, k, k)
		}
		out = floodgate.SlidingWindow{Limit: part(a.Limit, i, k), Window: a.Window, SubWindows: a.SubWindows}
	case floodgate.SlidingLog:
		if a.Limit < int64(k) {
			return nil, fmt.Errorf("%w: shard: %v over %d shards: Limit must be at least %d", floodgate.ErrInvalidConfig, a, k, k)
		}
		out = floodgate.SlidingLog{Limit: part(a.Limit, i, k), Window: a.Window}
	case floodgate.Limits:
		ls := make(floodgate.Limits, len(a))
		for j, l := range a {
			s, err := split(l, i, k)
			if err != nil {
				return nil, fmt.Errorf("shard: Limits[%d]: %w", j, err)
			}
			ls[j] = s
		}
		return ls, nil
	default:
		return nil, fmt.Errorf("%w: shard: %T is not one of floodgate's configurations", floodgate.ErrInvalidConfig, alg)
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("shard: %v over %d shards, shard %d is %v: %w", alg, k, i, out, err)
	}
	return out, nil
}

// quotas returns the quota of each limit of alg (one for a single
// algorithm), as Decision.Limit reports it.
func quotas(alg floodgate.Algorithm) []int64 {
	if ls, ok := alg.(floodgate.Limits); ok {
		q := make([]int64, len(ls))
		for j, l := range ls {
			l, _ = deref(l)
			q[j] = l.Policy().Quota
		}
		return q
	}
	return []int64{alg.Policy().Quota}
}

// deref returns the configuration a pointer points to, or an error
// matching floodgate.ErrInvalidConfig for a nil pointer.
func deref(alg floodgate.Algorithm) (floodgate.Algorithm, error) {
	var v floodgate.Algorithm
	switch a := alg.(type) {
	case *floodgate.TokenBucket:
		if a != nil {
			v = *a
		}
	case *floodgate.LeakyBucket:
		if a != nil {
			v = *a
		}
	case *floodgate.FixedWindow:
		if a != nil {
			v = *a
		}
	case *floodgate.CalendarWindow:
		if a != nil {
			v = *a
		}
	case *floodgate.SlidingWindow:
		if a != nil {
			v = *a
		}
	case *floodgate.SlidingLog:
		if a != nil {
			v = *a
		}
	case *floodgate.Limits:
		if a != nil {
			v = *a
		}
	default:
		return alg, nil
	}
	if v == nil {
		return nil, fmt.Errorf("%w: shard: a nil %T", floodgate.ErrInvalidConfig, alg)
	}
	return v, nil
}
