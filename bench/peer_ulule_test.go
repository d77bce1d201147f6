//go:build !nopeer_ulule

package bench

import (
	"context"

	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/store/memory"
	sredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// ululeRate is ulule's fixed window for q.
func ululeRate(q quota) limiter.Rate { return limiter.Rate{Period: q.Period, Limit: q.Limit} }

// ululeLib is github.com/ulule/limiter/v3 on its memory store (defaults):
// a fixed window counter per key; Get counts the call and reports Reached.
func ululeLib() inProc {
	return inProc{name: "ulule", open: func(q quota) (func(string) bool, func(), error) {
		lim := limiter.New(memory.NewStore(), ululeRate(q))
		ctx := context.Background()
		allow := func(key string) bool {
			c, err := lim.Get(ctx, key)
			return err == nil && !c.Reached
		}
		return allow, func() {}, nil
	}}
}

// ululeRedisLib is ulule on its Redis store: INCRBY and PEXPIRE in one Lua
// script per call.
func ululeRedisLib() remoteLib {
	return remoteLib{name: "ulule", open: func(c redis.UniversalClient, q quota) (func(context.Context, string) (bool, error), func(), error) {
		s, err := sredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule"})
		if err != nil {
			return nil, nil, err
		}
		lim := limiter.New(s, ululeRate(q))
		allow := func(ctx context.Context, key string) (bool, error) {
			r, err := lim.Get(ctx, key)
			return err == nil && !r.Reached, err
		}
		return allow, func() {}, nil
	}}
}
