//go:build !nofg_lease && !nofg_redisstore

package bench

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/redisstore"
)

// floodgateLease is the lease layer with its defaults (but the algorithm,
// which it must be told) in front of
// floodgate's token bucket on Redis: units are taken from Redis in batches
// and handed out locally.
func floodgateLease() remoteLib {
	return remoteLib{name: "floodgate-lease", open: func(c redis.UniversalClient, q quota) (func(context.Context, string) (bool, error), func(), error) {
		s, err := redisstore.New(c, nil)
		if err != nil {
			return nil, nil, err
		}
		p, err := lease.New(s, nil)
		if err != nil {
			_ = s.Close()
			return nil, nil, err
		}
		lim, err := floodgate.New(p, tokenBucket(q), nil)
		if err != nil {
			_ = p.Close()
			_ = s.Close()
			return nil, nil, err
		}
		allow := func(ctx context.Context, key string) (bool, error) {
			d, err := lim.Allow(ctx, key)
			return err == nil && d.Allowed, err
		}
		closeFn := func() {
			_ = p.Close()
			_ = s.Close()
		}
		return allow, closeFn, nil
	}}
}
