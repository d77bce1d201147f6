package sim

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stripe's fleet: critical requests are 20% of the offered load and
// non-critical (sheddable) ones 80%, at 0.5x, 1x, 2x and 3x of capacity.
// The criteria of issue 15: critical goodput >= 99% of its offered load at
// 3x; non-critical traffic is shed first; nothing is shed while the server
// is below 70% utilization (its true utilization when the request is shed:
// requests in it over workers, not the shedder's reading).
var stripeLoads = []float64{0.5, 1, 2, 3}

var stripeClasses = []Class{{Name: adaptive.ClassCritical, Weight: 0.2}, {Name: adaptive.ClassSheddable, Weight: 0.8}}

// stripePhases is a warm-up of warm windows at 0.5x (an adaptive limit
// starts at 20 and learns the server; it is not measured), each load for
// each windows, and 10 windows at 0.5x so that every request of the 3x
// phase finishes.
func stripePhases(warm, each int) []Phase {
	ps := []Phase{{Name: "warm", Duration: time.Duration(warm) * window, Load: 0.5}}
	for _, l := range stripeLoads {
		ps = append(ps, Phase{Name: loadName(l), Duration: time.Duration(each) * window, Load: l})
	}
	return append(ps, Phase{Name: "after", Duration: 10 * window, Load: 0.5})
}

func loadName(l float64) string { return fmt.Sprintf("%gx", l) }

// heavySeeds are criteriaSeeds for the simulations too slow for 4 seeds by
// default: 2 of them (0 and 1001) without FLOODGATE_SIM, and none under the
// race detector (the test is skipped).
func heavySeeds(t *testing.T) []uint64 {
	t.Helper()
	if os.Getenv("FLOODGATE_SIM") != "" {
		return criteriaSeeds(t)
	}
	if raceEnabled {
		t.Skip("a simulation on one goroutine, too slow under -race: go test without -race runs it")
	}
	return []uint64{0, 1001}
}

// loss returns the share of a class's offered requests that were not good:
// shed, rejected, capped, late or unfinished.
func loss(s Stats, class string) float64 {
	c := s.Classes[class]
	return 1 - float64(c.Good)/float64(c.Offered)
}

// stripeResult is what the Stripe criteria read from one run: the Stats of
// each load's phase after settle.
type stripeResult []Stats

func stripeMeasure(settle time.Duration) func(*Result) stripeResult {
	return func(r *Result) stripeResult {
		var out stripeResult
		for _, l := range stripeLoads {
			s, ok := r.Phase(loadName(l), settle)
			if !ok {
				panic("no phase " + loadName(l))
			}
			out = append(out, s)
		}
		return out
	}
}

// assertStripe checks the criteria on each seed's run, and logs the worst
// seed of each figure; workers is the server's size.
func assertStripe(t *testing.T, seeds []uint64, workers int, runs []stripeResult) {
	t.Helper()
	critical, lowShed := lowest(), lowest()
	critLoss := make([]*worst, len(stripeLoads))
	nonLoss := make([]*worst, len(stripeLoads))
	peak := make([]*worst, len(stripeLoads))
	for k := range stripeLoads {
		critLoss[k], nonLoss[k], peak[k] = highest(), lowest(), highest()
	}
	for i, st := range runs {
		seed := seeds[i]
		for k, s := range st {
			name := loadName(stripeLoads[k])
			require.Zerof(t, s.Unfinished, "seed %d %s: unfinished requests", seed, name)
			c, n := loss(s, adaptive.ClassCritical), loss(s, adaptive.ClassSheddable)
			assert.LessOrEqualf(t, c, n, "seed %d %s: critical lost %.4f, non-critical %.4f: non-critical must go first", seed, name, c, n)
			assert.Zerof(t, s.Classes[adaptive.ClassCritical].Shed, "seed %d %s: critical requests shed", seed, name)
			if s.Shed > 0 {
				assert.GreaterOrEqualf(t, s.ShedUtilization, 0.7, "seed %d %s: a request shed at utilization %.4f", seed, name, s.ShedUtilization)
				assert.GreaterOrEqualf(t, s.ShedGauge, 0.8, "seed %d %s: a request shed at a reading of %.4f", seed, name, s.ShedGauge)
				lowShed.add(seed, s.ShedUtilization)
			}
			critLoss[k].add(seed, c)
			nonLoss[k].add(seed, n)
			peak[k].add(seed, float64(s.Classes[adaptive.ClassSheddable].MaxInFlight)/float64(workers))
		}
		low := st[0]
		assert.Zerof(t, low.Shed+low.Rejected, "seed %d 0.5x: %d shed, %d rejected", seed, low.Shed, low.Rejected)
		g := 1 - loss(st[len(st)-1], adaptive.ClassCritical)
		assert.GreaterOrEqualf(t, g, 0.99, "seed %d 3x: critical goodput %.4f of offered, want >= 0.99", seed, g)
		critical.add(seed, g)
	}
	t.Logf("%s, %d seeds: critical goodput at 3x >= %s; lowest utilization at which a request was shed %s",
		t.Name(), len(seeds), critical.format(4, ""), lowShed.format(4, ""))
	for k, l := range stripeLoads {
		t.Logf("%s %s: critical lost <= %s, non-critical lost >= %s, non-critical in flight at most %s of the workers",
			t.Name(), loadName(l), critLoss[k].format(4, ""), nonLoss[k].format(4, ""), peak[k].format(4, ""))
	}
}

func TestStripeShedderOnLimiter(t *testing.T) {
	// One process: Windowed(Vegas) with a Shedder on it, which sheds the
	// non-critical class at 80% of the adaptive limit (the limit grows so
	// that the traffic admitted fills the server). At 100 workers the last
	// 20% of the limit absorbs the critical class's bursts; at 20 workers
	// it is 5 slots, about 1.4 standard deviations of the critical demand
	// at 3x, and a limit that refused every class alike once full kept
	// 0.9741 of the critical requests on the worst seed. A plain Limiter
	// admits ClassCritical up to ceil(2·sqrt(L)) above its limit, so the
	// plain limiter is the case asserted at both sizes; the third case
	// lists the critical class as a Partition of Share 1 instead (admitted
	// as long as fewer than the limit of its own are in flight), for
	// comparison.
	seeds := heavySeeds(t)
	for _, tc := range []struct {
		name    string
		workers int
		opts    *adaptive.LimiterOptions
	}{
		{"C=100", 100, nil},
		{"C=20", 20, nil},
		{"C=20,partition", 20, &adaptive.LimiterOptions{Partitions: []adaptive.Partition{{Name: adaptive.ClassCritical, Share: 1}}}},
	} {
		for _, dist := range []Distribution{Deterministic, Lognormal} {
			t.Run(tc.name+"/"+distName[dist], func(t *testing.T) {
				runs := perSeed(t, seeds, func(seed uint64) Config {
					return Config{
						Seed: seed, Workers: tc.workers, ServiceTime: S, Service: dist, Interval: window,
						Limiter: windowedVegas(tc.opts),
						Shedder: func(env Env) (*shed.Shedder, error) { return shed.New(env.Limiter, nil) },
						Classes: stripeClasses, Phases: stripePhases(60, 70),
					}
				}, stripeMeasure(settle))
				assertStripe(t, seeds, tc.workers, runs)
			})
		}
	}
}

// memFleet is the simulation's FleetSource: the load each process last
// recorded, summed. A run is on one goroutine; the mutex is for the
// contract, not for the run.
type memFleet struct {
	mu    sync.Mutex
	loads map[int]shed.Load
}

func (m *memFleet) source(process int) shed.FleetSource {
	return shed.FleetSourceFunc(func(_ context.Context, local shed.Load) (shed.Load, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.loads[process] = local
		var sum shed.Load
		for _, l := range m.loads {
			sum.InFlight += l.InFlight
			sum.Capacity += l.Capacity
		}
		return sum, nil
	})
}

// fleetConfig is Stripe's fleet: processes API processes sharing one
// backend of workers, with no limiter. Each sheds on a shed.Fleet of the
// backend's utilization (the requests each process has in it, over an
// equal share of its workers), exchanged every interval through memFleet,
// the processes at staggered instants; with local set, each sheds on its
// own share alone instead.
func fleetConfig(seed uint64, dist Distribution, workers, processes int, interval time.Duration, local bool) Config {
	src := &memFleet{loads: map[int]shed.Load{}}
	share := float64(workers) / float64(processes)
	return Config{
		Seed: seed, Workers: workers, ServiceTime: S, Service: dist, Interval: window, Processes: processes,
		Shedder: func(env Env) (*shed.Shedder, error) {
			load := func() shed.Load { return shed.Load{InFlight: float64(env.InFlight()), Capacity: share} }
			if local {
				return shed.New(shed.GaugeFunc(func() float64 { return load().Utilization() }), nil)
			}
			f, err := shed.NewFleet(src.source(env.Process), load, &shed.FleetOptions{Manual: true, Now: env.Now})
			if err != nil {
				return nil, err
			}
			// Process p exchanges at p/processes of each interval.
			tick := 0
			env.Every(interval/time.Duration(processes), func() {
				if tick%processes == env.Process {
					_ = f.Sync(context.Background())
				}
				tick++
			})
			return shed.New(f, nil)
		},
		Classes: stripeClasses, Phases: stripePhases(10, 40),
	}
}

// fleetSettle is what the fleet scenario skips of each phase: it has no
// limit to learn, only a queue to settle.
const fleetSettle = 5 * window

func TestStripeFleetShedder(t *testing.T) {
	// 8 processes share a backend of 200 workers and exchange their load
	// every S/40 (FleetOptions.Interval says why so often): the reserve
	// holds across the fleet (critical goodput), and nothing is shed below
	// 70% of the backend's true utilization. Deterministic service is the
	// hard case for that last criterion: requests admitted together
	// (processes admit together on a view up to an Interval old) leave
	// together exactly S later, and the utilization falls faster than an
	// exchange every S/40 follows; a Fleet that read the others' load as of
	// the exchange shed at 64.5%. Fleet.Utilization takes the others' load
	// to have fallen as this process's own has, or as it fell between the
	// last two exchanges. TestStripeFleetInterval shows longer intervals and
	// per-process gauges.
	seeds := heavySeeds(t)
	for _, dist := range []Distribution{Deterministic, Lognormal} {
		t.Run(distName[dist], func(t *testing.T) {
			runs := perSeed(t, seeds, func(seed uint64) Config {
				return fleetConfig(seed, dist, 200, 8, S/40, false)
			}, stripeMeasure(fleetSettle))
			assertStripe(t, seeds, 200, runs)
		})
	}
}

func TestStripeFleetInterval(t *testing.T) {
	// What FleetOptions.Interval's guidance rests on, logged rather than
	// asserted: the fleet scenario with longer intervals, and with each
	// process shedding on its own share of the backend instead of the
	// fleet's. It takes a minute or two: only with FLOODGATE_SIM=compare
	// (which also runs every criterion on the 40 seeds).
	if os.Getenv("FLOODGATE_SIM") != "compare" {
		t.Skip("a comparison for the docs: FLOODGATE_SIM=compare runs it")
	}
	seeds := criteriaSeeds(t)
	for _, tc := range []struct {
		name     string
		interval time.Duration
		local    bool
	}{
		{"interval=S/40", S / 40, false}, {"interval=S/20", S / 20, false}, {"interval=S/10", S / 10, false},
		{"interval=S", S, false},
		{"local", S, true},
	} {
		runs := perSeed(t, seeds, func(seed uint64) Config {
			return fleetConfig(seed, Lognormal, 200, 8, tc.interval, tc.local)
		}, stripeMeasure(fleetSettle))
		lowShed, peak, critical, falseShed := lowest(), highest(), lowest(), highest()
		for i, st := range runs {
			for _, s := range st {
				if s.Shed > 0 {
					lowShed.add(seeds[i], s.ShedUtilization)
				}
				peak.add(seeds[i], float64(s.Classes[adaptive.ClassSheddable].MaxInFlight)/200)
			}
			critical.add(seeds[i], 1-loss(st[3], adaptive.ClassCritical))
			falseShed.add(seeds[i], float64(st[0].Shed)/float64(st[0].Offered))
		}
		t.Logf("%s, lognormal, %d seeds: lowest utilization at a shed %s; shed at 0.5x <= %s; non-critical in flight <= %s of the workers; critical goodput at 3x >= %s",
			tc.name, len(seeds), lowShed.format(4, ""), falseShed.format(4, ""), peak.format(4, ""), critical.format(4, ""))
	}
}
