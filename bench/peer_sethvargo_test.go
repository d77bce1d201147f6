//go:build !nopeer_sethvargo

package bench

import (
	"context"

	"github.com/sethvargo/go-limiter/memorystore"
)

// sethvargoLib is github.com/sethvargo/go-limiter's memorystore with its
// defaults (sweep every 6h). Its buckets hand out Tokens per Interval and
// refill all at once at each tick anchored at the key's creation: in effect
// a per-key fixed window.
func sethvargoLib() inProc {
	return inProc{name: "sethvargo", open: func(q quota) (func(string) bool, func(), error) {
		s, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.Limit), Interval: q.Period})
		if err != nil {
			return nil, nil, err
		}
		ctx := context.Background()
		allow := func(key string) bool {
			_, _, _, ok, err := s.Take(ctx, key)
			return err == nil && ok
		}
		return allow, func() { _ = s.Close(ctx) }, nil
	}}
}
