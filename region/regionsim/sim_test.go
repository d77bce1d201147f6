package regionsim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/region"
)

// The simulated quota: 10,000 units per minute, three regions with floors
// of 5%, reconciled every second.
const (
	q        = int64(10000)
	window   = time.Minute
	interval = time.Second
)

var regions = []region.Region{{Name: "a", Floor: 0.05}, {Name: "b", Floor: 0.05}, {Name: "c", Floor: 0.05}}

// perSecond is the rate of a share of 1.2·Q per window.
func perSecond(share float64) float64 { return share * 1.2 * float64(q) / window.Seconds() }

// shifting is the demand: 60/30/10 at 1.2·Q in all, then from
// step on 10/30/60.
func shifting(step time.Duration) func(int, time.Duration) float64 {
	return func(r int, t time.Duration) float64 {
		shares := []float64{0.6, 0.3, 0.1}
		if t >= step {
			shares = []float64{0.1, 0.3, 0.6}
		}
		return perSecond(shares[r])
	}
}

// seeds is the number of seeds of each scenario: fewer under the race
// detector, which slows the simulator twenty-fold.
var seeds = map[bool]int{false: 20, true: 3}[raceEnabled]

// checkSafe asserts the invariants that hold whatever happens: Σ admitted
// ≤ Q in every window, the coordinator never holds more than Q, and no
// region makes more than two cross-region calls in an interval.
func checkSafe(t *testing.T, res *Result) {
	t.Helper()
	for i, a := range res.Admitted {
		if sum := a[0] + a[1] + a[2]; sum > q {
			t.Fatalf("window %d: admitted %v = %d in all, above the quota %d", i, a, sum, q)
		}
	}
	if res.MaxHeld > q {
		t.Fatalf("the coordinator held %d units of a window, above the quota %d", res.MaxHeld, q)
	}
	for r, st := range res.Stats {
		if st.MaxCallsPerInterval > 2 || st.Calls > 2*st.Intervals {
			t.Fatalf("region %d: %d calls in %d intervals, at most %d in one; want at most 2 per interval", r, st.Calls, st.Intervals, st.MaxCallsPerInterval)
		}
	}
	// Counted outside the Stores, per region whatever its processes:
	// reconciles start an Interval apart on average (their jitter is
	// symmetric), so a region makes at most 2 calls per interval of the
	// run; 4 more for the rounding at both ends.
	intervals := int64(len(res.Samples))
	for r, n := range res.Calls {
		if n > 2*intervals+4 {
			t.Fatalf("region %d: %d calls to the coordinator in %d intervals, above 2 per interval", r, n, intervals)
		}
	}
}

// oracle is what each region should hold of the current window at a
// sample, computed from the true demand (without noise) and what each
// region has used: region.CurrentTargets, with every region fresh.
func oracle(t *testing.T, s Sample) []int64 {
	t.Helper()
	reports := make([]region.RegionReport, len(regions))
	ws := region.WindowState{Index: s.Window, Granted: make([]int64, len(regions)), Debited: make([]int64, len(regions))}
	at := time.Unix(0, s.Window*int64(window)).Add(s.Elapsed)
	for r := range regions {
		reports[r] = region.RegionReport{Report: region.Report{Rate: s.Rate[r], Window: s.Window, Used: s.Used[r]}, At: at}
		ws.Granted[r] = q
	}
	targets, err := region.CurrentTargets(q, regions, ws, reports, 0, at, window-s.Elapsed, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return targets
}

// converged reports whether every region holds its oracle target within
// 2% of the quota.
func converged(t *testing.T, s Sample) bool {
	t.Helper()
	for r, want := range oracle(t, s) {
		if d := s.Held[r] - want; d > q/50 || d < -q/50 {
			return false
		}
	}
	return true
}

// TestConvergence runs the scenario over many seeds: demand
// 60/30/10 at 1.2·Q; a step to 10/30/60 in the middle of the third
// window. Allocations are within 2% of the fair share 3 intervals after
// the start and after the step, and at every sample in between; at least
// 95% of the quota is admitted in every window; never more than the
// quota.
func TestConvergence(t *testing.T) { convergence(t, 1, 3*interval) }

// convergence runs TestConvergence's scenario with the given processes
// per region, checking allocations from cold after the start (and 3
// intervals after the step) on, and logs what it measured.
func convergence(t *testing.T, processes int, cold time.Duration) {
	minUse, maxDev, lastOff, lastCold := 1.0, int64(0), time.Duration(0), time.Duration(0)
	var led int64
	defer func() {
		t.Logf("over %d seeds, %d processes per region: least use of a window %.2f%% of Q; largest distance from the fair share from %v after the start and 3 intervals after the step %d units (%.2f%% of Q); the latest sample off by more than 2%% was %.2f intervals after the step, and %.2f intervals after the start; %d intervals led",
			seeds, processes, 100*minUse, cold, maxDev, 100*float64(maxDev)/float64(q), lastOff.Seconds()/interval.Seconds(), lastCold.Seconds()/interval.Seconds(), led)
	}()
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			step := 2*window + time.Duration(rng.Int64N(int64(50*time.Second))) + 5*time.Second
			step = step.Truncate(10 * time.Millisecond)
			res, err := Run(Config{Seed: seed, Regions: regions, Limit: q, Window: window, Duration: 5 * window,
				Noise: 0.02, MaxSkew: 200 * time.Millisecond, Demand: shifting(step), Processes: processes})
			if err != nil {
				t.Fatal(err)
			}
			checkSafe(t, res)
			for r, st := range res.Stats {
				led += st.Led
				if processes > 1 && st.Syncs < int64(len(res.Samples)) {
					t.Errorf("region %d: %d syncs in %d intervals of %d processes", r, st.Syncs, len(res.Samples), processes)
				}
			}
			for i, a := range res.Admitted[:5] {
				minUse = min(minUse, float64(a[0]+a[1]+a[2])/float64(q))
				if sum := a[0] + a[1] + a[2]; sum < q*95/100 {
					t.Errorf("window %d: admitted %v = %d in all, below 95%% of the quota", i, a, sum)
				}
			}
			for _, s := range res.Samples {
				switch {
				case s.T > step && !converged(t, s):
					lastOff = max(lastOff, s.T-step)
				case s.T < step && !converged(t, s):
					lastCold = max(lastCold, s.T)
				}
				if s.T < cold || (s.T >= step && s.T < step+3*interval) {
					continue
				}
				for r, want := range oracle(t, s) {
					maxDev = max(maxDev, s.Held[r]-want, want-s.Held[r])
				}
				if !converged(t, s) {
					t.Errorf("at %v (step at %v): regions hold %v, want %v ± %d (used %v)", s.T, step, s.Held, oracle(t, s), q/50, s.Used)
				}
			}
		})
	}
}

// TestCutOff cuts region c's link to the coordinator in the middle of a
// window, and in a window's last seconds (after it may have been granted
// the next). c keeps the grants it holds until they end, then admits no
// more than its floor per window; the others absorb the rest of the quota
// only in windows after c's grants ended; never more than the quota.
func TestCutOff(t *testing.T) {
	floor := int64(regions[2].Floor * float64(q))
	demand := func(r int, _ time.Duration) float64 { return perSecond([]float64{0.5, 0.3, 0.4}[r]) }
	for _, tc := range []struct {
		name string
		at   time.Duration
	}{{"mid-window", window + 20*time.Second}, {"end of window", 2*window - 1500*time.Millisecond}} {
		for seed := range uint64(seeds / 2) {
			t.Run(fmt.Sprint(tc.name, "/", seed), func(t *testing.T) {
				at := tc.at + time.Duration(seed)*37*time.Millisecond
				res, err := Run(Config{Seed: seed, Regions: regions, Limit: q, Window: window, Duration: 5 * window,
					Noise: 0.02, MaxSkew: 200 * time.Millisecond, Demand: demand,
					Cut: func(r int, t time.Duration) bool { return r == 2 && t >= at }})
				if err != nil {
					t.Fatal(err)
				}
				checkSafe(t, res)
				var heldAtCut, nextAtCut int64 = -1, -1
				for _, s := range res.Samples {
					w := int(s.Window - res.Start)
					switch {
					case s.T >= at && heldAtCut < 0:
						heldAtCut, nextAtCut = s.Held[2], s.Next[2]
					case s.T >= at && w == 1 && s.Held[2] != heldAtCut:
						// Nobody but c can debit c's units.
						t.Fatalf("at %v: c holds %d of its window, %d when cut off", s.T, s.Held[2], heldAtCut)
					case w == 3 && s.Elapsed >= 5*time.Second:
						if sum := s.Held[0] + s.Held[1]; sum < q-floor-q/50 {
							t.Errorf("at %v: a and b hold %v, want about %d between them", s.T, s.Held[:2], q-floor)
						}
					}
				}
				if c := res.Admitted[1][2]; c <= floor {
					t.Errorf("window 1: c admitted %d, no more than its floor %d: it lost the grant it held", c, floor)
				}
				t.Logf("cut at %v: c held %d, next %d; admitted per window %v", at, heldAtCut, nextAtCut, res.Admitted[:5])
				last := 2 // the first window c holds no grant of
				if nextAtCut > floor {
					last = 3
					if c := res.Admitted[2][2]; c > nextAtCut {
						t.Errorf("window 2: c admitted %d, above its lease of %d", c, nextAtCut)
					}
				}
				for w := last; w < 5; w++ {
					if c := res.Admitted[w][2]; c > floor {
						t.Errorf("window %d: cut-off c admitted %d, above its floor %d", w, c, floor)
					}
				}
				if a := res.Admitted[4]; a[0]+a[1] < (q-floor)*95/100 {
					t.Errorf("window 4: a and b admitted %v, below 95%% of the %d c left", a[:2], q-floor)
				}
			})
		}
	}
}

// TestKillAtEveryStep kills one region's reconciler at one step of its
// protocol, every interval while units move (after the demand step), and
// restarts it knowing nothing: units may be stranded, never duplicated.
// Stranded units stay stranded until their window ends, so allocation is
// checked in the next window: within 2% of the fair share throughout.
func TestKillAtEveryStep(t *testing.T) {
	step := 2*window + 20*time.Second
	stop := step + 8*interval
	for _, st := range region.Steps() {
		for r := range regions {
			t.Run(fmt.Sprintf("%v/%s", st, regions[r].Name), func(t *testing.T) {
				kills := 0
				res, err := Run(Config{Seed: uint64(st)*10 + uint64(r), Regions: regions, Limit: q, Window: window, Duration: 4 * window,
					Noise: 0.02, MaxSkew: 200 * time.Millisecond, Loss: 0.05, Demand: shifting(step),
					Kill: func(k int, t time.Duration, s region.Step) bool {
						if k == r && s == st && t >= step && t < stop {
							kills++
							return true
						}
						return false
					}})
				if err != nil {
					t.Fatal(err)
				}
				checkSafe(t, res)
				// The second call, and so StepSettled, happens only in
				// intervals that move units.
				if kills < 1 || kills < 5 && st != region.StepSettled {
					t.Fatalf("killed %d times, want at least 5", kills)
				}
				if st == region.StepDebited && r == 0 && res.Stats[0].StrandedUnits == 0 {
					t.Errorf("a, the donor, was killed after its debits %d times and stranded nothing", kills)
				}
				for _, s := range res.Samples {
					if s.Window-res.Start >= 3 && !converged(t, s) {
						t.Errorf("at %v (kills until %v): regions hold %v, want %v ± %d", s.T, stop, s.Held, oracle(t, s), q/50)
					}
				}
			})
		}
	}
}

// TestFaults shuffles demand at random and adds every fault at once, over
// many seeds: lost calls and replies, links cut for seconds, reconcilers
// killed at random steps, clock skews up to ±100ms. Σ admitted ≤ Q in
// every window, always.
func TestFaults(t *testing.T) {
	for seed := range uint64(3 * seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			// Demand changes every 7 to 30 seconds, per region, between 0
			// and 0.8·Q per window.
			type change struct {
				at   time.Duration
				rate float64
			}
			plan := make([][]change, len(regions))
			for r := range plan {
				for at := time.Duration(0); at < 5*window; at += time.Duration(7+rng.IntN(24)) * time.Second {
					plan[r] = append(plan[r], change{at, rng.Float64() * 0.8 * float64(q) / window.Seconds()})
				}
			}
			cuts := make([][2]time.Duration, 6)
			for i := range cuts {
				from := time.Duration(rng.Int64N(int64(5 * window)))
				cuts[i] = [2]time.Duration{from, from + time.Duration(rng.Int64N(int64(20*time.Second)))}
			}
			kill := rand.New(rand.NewPCG(seed, 3))
			res, err := Run(Config{Seed: seed, Regions: regions, Limit: q, Window: window, Duration: 5 * window,
				Noise: 0.2, MaxSkew: 200 * time.Millisecond, Loss: 0.1,
				Demand: func(r int, t time.Duration) float64 {
					rate := 0.0
					for _, c := range plan[r] {
						if c.at <= t {
							rate = c.rate
						}
					}
					return rate
				},
				Cut: func(r int, t time.Duration) bool {
					c := cuts[2*r+int(t/(150*time.Second))%2]
					return t >= c[0] && t < c[1]
				},
				Kill: func(int, time.Duration, region.Step) bool { return kill.Float64() < 0.01 },
			})
			if err != nil {
				t.Fatal(err)
			}
			checkSafe(t, res)
		})
	}
}

// TestDeterministic runs one seed twice.
func TestDeterministic(t *testing.T) {
	cfg := Config{Seed: 7, Regions: regions, Limit: q, Window: window, Duration: 2 * window, Noise: 0.1,
		MaxSkew: 200 * time.Millisecond, Loss: 0.1, Demand: shifting(90 * time.Second)}
	a, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a.Admitted, a.Samples) != fmt.Sprint(b.Admitted, b.Samples) {
		t.Fatal("two runs of one seed differ")
	}
}

// TestPoisson runs the scenario with Poisson arrivals: demand measured
// over an interval is then noisy (√λI units), so allocations wander from
// the fair share of the true rates by more than 2%; the test asserts the
// bounds and use, and logs the distance.
func TestPoisson(t *testing.T) {
	maxDev, minUse := int64(0), 1.0
	var devs []int64
	worst := ""
	for seed := range uint64(seeds) {
		res, err := Run(Config{Seed: seed, Regions: regions, Limit: q, Window: window, Duration: 5 * window,
			Poisson: true, MaxSkew: 200 * time.Millisecond, Demand: shifting(150 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		checkSafe(t, res)
		for i, a := range res.Admitted[:5] {
			use := float64(a[0]+a[1]+a[2]) / float64(q)
			minUse = min(minUse, use)
			if use < 0.95 {
				t.Errorf("seed %d, window %d: admitted %v, below 95%% of the quota", seed, i, a)
			}
		}
		for _, s := range res.Samples {
			if s.T < 3*interval || (s.T >= 150*time.Second && s.T < 153*time.Second) {
				continue
			}
			d := int64(0)
			for r, want := range oracle(t, s) {
				d = max(d, s.Held[r]-want, want-s.Held[r])
			}
			devs = append(devs, d)
			if d > maxDev {
				maxDev = d
				worst = fmt.Sprintf("seed %d at %v: held %v, fair %v, used %v", seed, s.T, s.Held, oracle(t, s), s.Used)
			}
		}
	}
	slices.Sort(devs)
	t.Logf("Poisson arrivals, %d seeds: least use of a window %.2f%%; distance from the fair share of the true rates: median %d, p99 %d, max %d units of %d",
		seeds, 100*minUse, devs[len(devs)/2], devs[len(devs)*99/100], maxDev, q)
	t.Logf("the largest: %s", worst)
}

// TestProcesses runs TestConvergence's scenario with three processes per
// region, sharing each region's traffic round robin and one reconciler
// through region.MemPeers: Σ admitted ≤ Q, at most 2 calls per region per
// interval, ≥ 95% of Q admitted, and within 2% of the fair share from 3
// intervals after the step, as with one process per region, since the
// leader reports the demand of all three. From a cold start (every
// process new, so the first leader measures before it reconciles) the
// allocation is checked from 8 intervals on rather than 3.
func TestProcesses(t *testing.T) { convergence(t, 3, 8*interval) }

// TestProcessesFaults is TestFaults' scenario with three processes per
// region: lost calls and replies, cut links, and processes killed at
// random steps (a killed leader keeps its lease until it ends, and the
// restarted process is a new member). Σ admitted ≤ Q in every window and
// at most 2 calls per region per interval, always.
func TestProcessesFaults(t *testing.T) {
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 4))
			res, err := Run(Config{Seed: seed, Regions: regions, Limit: q, Window: window, Duration: 4 * window,
				Noise: 0.2, MaxSkew: 200 * time.Millisecond, Loss: 0.1, Processes: 3,
				Demand: func(r int, t time.Duration) float64 {
					return perSecond([]float64{0.6, 0.3, 0.1}[(r+int(t/(37*time.Second)))%3])
				},
				Cut: func(r int, t time.Duration) bool {
					return r == int(t/(50*time.Second))%3 && t%(50*time.Second) < 8*time.Second
				},
				Kill: func(int, time.Duration, region.Step) bool { return rng.Float64() < 0.02 },
			})
			if err != nil {
				t.Fatal(err)
			}
			checkSafe(t, res)
		})
	}
}

// TestCalendar splits a daily quota of 100,000 in New York's time zone,
// over three days from 6 March 2026, the third of which is 23 hours long
// (clocks go forward on 8 March), with a demand step on the second day:
// Σ admitted ≤ Q on every day, at least 95% of Q used on each full day,
// at most 2 calls per region per interval, and allocations within 2% of
// the fair share from 3 intervals after the step on.
func TestCalendar(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	const dq = int64(100_000)
	cal := floodgate.CalendarWindow{Limit: dq, Unit: floodgate.Day, Location: ny}
	const ival = time.Minute
	for seed := range uint64(map[bool]int{false: 4, true: 1}[raceEnabled]) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			perSec := func(share float64) float64 { return share * 1.2 * float64(dq) / 86400 }
			step := 36*time.Hour + time.Duration(seed)*17*time.Minute
			res, err := Run(Config{Seed: seed, Regions: regions, Limit: dq, Window: cal.Policy().Window, Calendar: &cal,
				Interval: ival, Margin: 5 * time.Second, Tick: time.Second, Duration: 3*24*time.Hour - time.Hour,
				Noise: 0.02, MaxSkew: 2 * time.Second,
				Demand: func(r int, at time.Duration) float64 {
					shares := []float64{0.6, 0.3, 0.1}
					if at >= step {
						shares = []float64{0.1, 0.3, 0.6}
					}
					return perSec(shares[r])
				}})
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range res.Admitted {
				if sum := a[0] + a[1] + a[2]; sum > dq {
					t.Fatalf("day %d: admitted %v = %d, above the quota %d", i, a, sum, dq)
				}
			}
			if res.MaxHeld > dq {
				t.Fatalf("the coordinator held %d of a day", res.MaxHeld)
			}
			intervals := int64(len(res.Samples))
			for r, n := range res.Calls {
				if n > 2*intervals+4 {
					t.Fatalf("region %d: %d calls in %d intervals", r, n, intervals)
				}
			}
			for i, a := range res.Admitted[:3] {
				if sum := a[0] + a[1] + a[2]; sum < dq*95/100 {
					t.Errorf("day %d: admitted %v = %d, below 95%% of the quota", i, a, sum)
				}
			}
			for _, s := range res.Samples {
				if s.T < 3*ival || (s.T >= step && s.T < step+3*ival) {
					continue
				}
				reports := make([]region.RegionReport, len(regions))
				ws := region.WindowState{Index: s.Window, Granted: make([]int64, len(regions)), Debited: make([]int64, len(regions))}
				at := time.Unix(0, 0).Add(s.Elapsed) // only differences of times matter below
				for r := range regions {
					reports[r] = region.RegionReport{Report: region.Report{Rate: s.Rate[r], Window: s.Window, Used: s.Used[r]}, At: at}
					ws.Granted[r] = dq
				}
				want, err := region.CurrentTargets(dq, regions, ws, reports, 0, at, s.Left, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				for r := range regions {
					if d := s.Held[r] - want[r]; d > dq/50 || d < -dq/50 {
						t.Fatalf("at %v (step at %v): regions hold %v, want %v ± %d", s.T, step, s.Held, want, dq/50)
					}
				}
			}
			var sums []int64
			for _, a := range res.Admitted[:3] {
				sums = append(sums, a[0]+a[1]+a[2])
			}
			t.Logf("admitted per day: %v, in all %v (the third is 23 hours long)", res.Admitted[:3], sums)
		})
	}
}
