//go:build !nopeer_xtimerate

package bench

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// xtimerateLib is golang.org/x/time/rate keyed through a sync.Map, as users
// key it: Load, and LoadOrStore of a new Limiter for a new key.
func xtimerateLib() inProc {
	return inProc{name: "xtimerate", open: func(q quota) (func(string) bool, func(), error) {
		var m sync.Map
		every := rate.Every(q.Period / time.Duration(q.Limit))
		allow := func(key string) bool {
			if l, ok := m.Load(key); ok {
				return l.(*rate.Limiter).Allow()
			}
			l, _ := m.LoadOrStore(key, rate.NewLimiter(every, int(q.Limit)))
			return l.(*rate.Limiter).Allow()
		}
		return allow, func() {}, nil
	}}
}
