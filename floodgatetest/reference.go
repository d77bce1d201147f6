package floodgatetest

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// Reference applies the reference transitions of package step to states
// kept in maps, one per key and algorithm kind, as floodgate.Store
// requires: the decisions every store must reproduce. Run checks stores
// against it; a store's own tests use it where they drive the store in ways
// Run cannot (its reclamation, eviction or options). The zero value is a
// Reference in which every key is new. A Reference is not safe for
// concurrent use.
type Reference struct {
	words map[slot]int64 // token bucket and leaky bucket
	fw    map[slot]step.FixedWindowState
	sw    map[slot]step.SlidingWindowState
	sl    map[slot]*step.SlidingLogState
}

// slot names one state: a key's state belongs to the key and the kind.
type slot struct {
	key  string
	kind step.Kind
}

// Apply applies req for key with alg at now, as a store's Apply would,
// and returns what the store must return. alg is one of the five
// configurations as a value; the state it reads and writes is key's state
// for alg's kind, whatever alg's configuration.
func (r *Reference) Apply(key string, alg floodgate.Algorithm, now time.Time, req floodgate.Request) (floodgate.Result, error) {
	if r.words == nil {
		r.words = map[slot]int64{}
		r.fw = map[slot]step.FixedWindowState{}
		r.sw = map[slot]step.SlidingWindowState{}
		r.sl = map[slot]*step.SlidingLogState{}
	}
	if err := step.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	kind, err := step.KindOf(alg)
	if err != nil {
		return floodgate.Result{}, err
	}
	s := slot{key, kind}
	var res floodgate.Result
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		r.words[s], res, err = step.TokenBucket(a, r.words[s], now, req)
	case floodgate.LeakyBucket:
		r.words[s], res, err = step.LeakyBucket(a, r.words[s], now, req)
	case floodgate.FixedWindow:
		r.fw[s], res, err = step.FixedWindow(a, r.fw[s], now, req)
	case floodgate.SlidingWindow:
		r.sw[s], res, err = step.SlidingWindow(a, r.sw[s], now, req)
	case floodgate.SlidingLog:
		if r.sl[s] == nil {
			r.sl[s] = new(step.SlidingLogState)
		}
		res, err = step.SlidingLog(a, r.sl[s], now, req)
	default:
		err = fmt.Errorf("%w: %T", floodgate.ErrInvalidConfig, alg)
	}
	return res, err
}

// SameResult reports whether two Results are equal, their instants
// compared with time.Time.Equal: a store may return Result.At in another
// location or without a monotonic reading.
func SameResult(a, b floodgate.Result) bool {
	if !a.At.Equal(b.At) {
		return false
	}
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}
