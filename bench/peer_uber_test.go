//go:build !nopeer_uber

package bench

import (
	"sync"

	"go.uber.org/ratelimit"
)

// uberLib is go.uber.org/ratelimit keyed through a sync.Map. Its only
// operation is Take, which sleeps until the next slot: it never denies, so
// it runs only where calls are to be admitted. It has no burst either (only
// a slack of 10 slots), so the common quota would make Take sleep on a hot
// key; it paces at one slot per nanosecond instead, the one configuration
// in which Take never sleeps, and the benchmark measures its atomic
// scheduling step.
func uberLib() inProc {
	return inProc{
		name:   "uber",
		noDeny: "skipped: go.uber.org/ratelimit only blocks (Take); it cannot deny",
		open: func(quota) (func(string) bool, func(), error) {
			var m sync.Map
			newLimiter := func() ratelimit.Limiter { return ratelimit.New(1_000_000_000) }
			allow := func(key string) bool {
				l, ok := m.Load(key)
				if !ok {
					l, _ = m.LoadOrStore(key, newLimiter())
				}
				l.(ratelimit.Limiter).Take()
				return true
			}
			return allow, func() {}, nil
		},
	}
}
