package bench

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// floodgateInProc returns floodgate on its in-process store in the timed
// scenarios: the token bucket (the bar of the issue) and, for like-for-like
// comparisons, the fixed window (the algorithm of ulule and, in effect,
// sethvargo) and the sliding window counter (httprate's).
func floodgateInProc() []inProc {
	return []inProc{
		fgMem("floodgate", tokenBucket),
		fgMem("floodgate-fixedwindow", fixedWindow),
		fgMem("floodgate-slidingwindow", slidingWindow),
	}
}

// floodgateMemAlgorithms returns each of floodgate's five algorithms on its
// in-process store, named as in floodgateRedisAlgorithms: the memory
// scenario measures every one of them.
func floodgateMemAlgorithms() []inProc {
	return []inProc{
		fgMem("floodgate", tokenBucket),
		fgMem("floodgate-leakybucket", leakyBucket),
		fgMem("floodgate-fixedwindow", fixedWindow),
		fgMem("floodgate-slidingwindow", slidingWindow),
		fgMem("floodgate-slidinglog", slidingLog),
	}
}

// fgMem is floodgate's limiter for alg(q) on a memstore with the default
// options.
func fgMem(name string, alg func(q quota) floodgate.Algorithm) inProc {
	return inProc{name: name, open: func(q quota) (func(string) bool, func(), error) {
		s, err := memstore.New(nil)
		if err != nil {
			return nil, nil, err
		}
		lim, err := floodgate.New(s, alg(q), nil)
		if err != nil {
			return nil, nil, err
		}
		ctx := context.Background()
		allow := func(key string) bool {
			d, err := lim.Allow(ctx, key)
			return err == nil && d.Allowed
		}
		return allow, func() {}, nil
	}}
}

func tokenBucket(q quota) floodgate.Algorithm {
	return floodgate.TokenBucket{Rate: q.Limit, Per: q.Period, Burst: q.Limit}
}
func leakyBucket(q quota) floodgate.Algorithm {
	return floodgate.LeakyBucket{Rate: q.Limit, Per: q.Period, Capacity: q.Limit}
}
func fixedWindow(q quota) floodgate.Algorithm {
	return floodgate.FixedWindow{Limit: q.Limit, Window: q.Period}
}
func slidingWindow(q quota) floodgate.Algorithm {
	return floodgate.SlidingWindow{Limit: q.Limit, Window: q.Period}
}
func slidingLog(q quota) floodgate.Algorithm {
	return floodgate.SlidingLog{Limit: q.Limit, Window: q.Period}
}
