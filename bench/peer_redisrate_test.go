//go:build !nopeer_redisrate

package bench

import (
	"context"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// redisrateLib is github.com/go-redis/redis_rate/v10: GCRA in one Lua
// script on one key, with the server's clock, run by go-redis' Script
// (EVALSHA, EVAL on NOSCRIPT).
func redisrateLib() remoteLib {
	return remoteLib{name: "redis_rate", open: func(c redis.UniversalClient, q quota) (func(context.Context, string) (bool, error), func(), error) {
		lim := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: int(q.Limit), Burst: int(q.Limit), Period: q.Period}
		allow := func(ctx context.Context, key string) (bool, error) {
			r, err := lim.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
		return allow, func() {}, nil
	}}
}
