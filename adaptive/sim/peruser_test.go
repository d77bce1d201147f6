package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The per-user scenario of issue 15: ten users share a server of 20
// workers; nine send requests of S, one (abusive) sends as many requests
// but holds each for 20·S (a slow report, with a deadline of 200·S). The
// offered work is 1.45 times the server's: the abusive user's alone is
// 1x. A per-user concurrent-request limit (Stripe's second tier, package
// inflight in floodgate; the simulator models the cap itself with
// Class.MaxInFlight, since the cap needs no store there) of 5 in flight
// keeps the abusive user to 5 workers, and the others are served.

func perUserConfig(seed uint64, dist Distribution, limit int) Config {
	var users []Class
	for i := range 9 {
		users = append(users, Class{Name: fmt.Sprintf("user%d", i), Weight: 1, MaxInFlight: limit})
	}
	users = append(users, Class{Name: "abuser", Weight: 1, ServiceTime: 20 * S, Deadline: 200 * S, MaxInFlight: limit})
	return Config{
		Seed: seed, Workers: 20, ServiceTime: S, Service: dist, Interval: window, Classes: users,
		Phases: []Phase{
			{Name: "on", Duration: 100 * window, Load: 0.5},
			{Name: "after", Duration: 10 * time.Second, Load: 0}, // every request of "on" finishes
		},
	}
}

func TestPerUserConcurrency(t *testing.T) {
	seeds := criteriaSeeds(t)
	for _, dist := range []Distribution{Deterministic, Lognormal} {
		t.Run(distName[dist], func(t *testing.T) {
			measure := func(r *Result) Stats {
				s, _ := r.Phase("on", 10*window)
				return s
			}
			capped := perSeed(t, seeds, func(seed uint64) Config { return perUserConfig(seed, dist, 5) }, measure)
			uncapped := perSeed(t, seeds, func(seed uint64) Config { return perUserConfig(seed, dist, 0) }, measure)
			others, without, abuser, peak := lowest(), highest(), lowest(), highest()
			for i := range seeds {
				seed := seeds[i]
				good := func(s Stats) float64 {
					var g, o int
					for name, c := range s.Classes {
						if name != "abuser" {
							g += c.Good
							o += c.Offered
						}
					}
					return float64(g) / float64(o)
				}
				with, wo := capped[i], uncapped[i]
				assert.Zerof(t, with.Unfinished+wo.Unfinished, "seed %d: unfinished requests", seed)
				g := good(with)
				assert.GreaterOrEqualf(t, g, 0.99, "seed %d: the other users' goodput with the cap = %.4f, want >= 0.99", seed, g)
				assert.Lessf(t, good(wo), 0.5, "seed %d: without the cap the abusive user must take the others down (%.4f)", seed, good(wo))
				a := with.Classes["abuser"]
				assert.LessOrEqualf(t, a.MaxInFlight, 5, "seed %d: the abusive user held %d", seed, a.MaxInFlight)
				others.add(seed, g)
				without.add(seed, good(wo))
				abuser.add(seed, float64(a.Good)/float64(a.Offered))
				peak.add(seed, float64(a.MaxInFlight))
			}
			t.Logf("%s, %d seeds: the other users' goodput >= %s with a cap of 5 per user, <= %s without; the abusive user's goodput >= %s, at most %s in flight",
				t.Name(), len(seeds), others.format(4, ""), without.format(4, ""), abuser.format(4, ""), peak.format(0, ""))
		})
	}
}
