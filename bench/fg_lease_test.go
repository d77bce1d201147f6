//go:build !nofg_lease && !nofg_redisstore

package bench

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
)

// floodgateLease is the lease layer with its defaults (but the algorithm,
// which it must be told, and the timeout of its round trips, raised from
// 1s like the store's) in front of
// floodgate's token bucket on Redis: units are taken from Redis in batches
// and handed out locally.
func floodgateLease() remoteLib {
	return remoteLib{name: "floodgate-lease", open: func(c redis.UniversalClient, q quota) (func(context.Context, string) (bool, error), func(), error) {
		alg := tokenBucket(q)
		remote, closeRemote, err := openFloodgateRedis(c, alg, redisstore.Options{})
		if err != nil {
			return nil, nil, err
		}
		p, err := lease.New(remote, nil)
		if err != nil {
			closeRemote()
			return nil, nil, err
		}
		var lim floodgate.Limiter = p
		allow := func(ctx context.Context, key string) (bool, error) {
			d, err := lim.Allow(ctx, key)
			return err == nil && d.Allowed, err
		}
		closeFn := func() {
			closeAny(p)
			closeRemote()
		}
		return allow, closeFn, nil
	}}
}

// closeAny closes v if it has a Close method, whichever its signature.
func closeAny(v any) {
	switch c := v.(type) {
	case interface{ Close() error }:
		_ = c.Close()
	case interface{ Close() }:
		c.Close()
	case interface{ Close(context.Context) error }:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}
}
