//go:build !nofg_redisstore

package bench

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// openFloodgateRedis returns a floodgate Limiter running alg on a
// redisstore.Store over c with opts (the defaults but for what opts sets:
// its per-call timeout, 50ms, included; the peers have none and wait as
// long as go-redis lets them), and the function closing the store.
func openFloodgateRedis(c redis.UniversalClient, alg floodgate.Algorithm, opts redisstore.Options) (*floodgate.Limiter, func(), error) {
	s, err := redisstore.New(c, &opts)
	if err != nil {
		return nil, nil, err
	}
	lim, err := floodgate.New(s, alg, nil)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return lim, func() { s.Close() }, nil
}

// fgRedis returns a remoteLib for floodgate's Redis store running the
// algorithm alg makes of the quota. With reserve, a call is a Reserve with
// the algorithm's whole window as its maximum delay (the leaky bucket is a
// shaper: Allow admits only what departs at once).
func fgRedis(name string, opts redisstore.Options, reserve bool, alg func(q quota) floodgate.Algorithm) remoteLib {
	return remoteLib{name: name, open: func(c redis.UniversalClient, q quota) (func(context.Context, string) (bool, error), func(), error) {
		a := alg(q)
		lim, closeFn, err := openFloodgateRedis(c, a, opts)
		if err != nil {
			return nil, nil, err
		}
		maxDelay := time.Duration(0)
		if reserve {
			maxDelay = a.Policy().Window
		}
		allow := func(ctx context.Context, key string) (bool, error) {
			d, err := lim.Reserve(ctx, key, 1, maxDelay)
			return err == nil && d.Allowed, err
		}
		return allow, closeFn, nil
	}}
}

// floodgateRedis is floodgate's Redis store in the latency and throughput
// scenarios: the token bucket (GCRA, like redis_rate) with the store's
// defaults (batching on), the same unbatched, and the fixed window
// (ulule's algorithm).
func floodgateRedis() []remoteLib {
	return []remoteLib{
		fgRedis("floodgate", redisstore.Options{}, false, tokenBucket),
		fgRedis("floodgate-unbatched", redisstore.Options{BatchSize: 1}, false, tokenBucket),
		fgRedis("floodgate-fixedwindow", redisstore.Options{}, false, fixedWindow),
	}
}

// floodgateRedisAlgorithms is every algorithm on floodgate's Redis store,
// for the accuracy and memory scenarios.
func floodgateRedisAlgorithms() []remoteLib {
	return []remoteLib{
		fgRedis("floodgate", redisstore.Options{}, false, tokenBucket),
		fgRedis("floodgate-leakybucket", redisstore.Options{}, true, leakyBucket),
		fgRedis("floodgate-fixedwindow", redisstore.Options{}, false, fixedWindow),
		fgRedis("floodgate-slidingwindow", redisstore.Options{}, false, slidingWindow),
		fgRedis("floodgate-slidinglog", redisstore.Options{}, false, slidingLog),
	}
}
