package sim

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The acceptance criteria of the adaptive limiter, after the harness the
// reference notes propose (adaptive-headers-spec.md §6.2): a server of C
// workers with service time S, Poisson arrivals stepping through 0.5×, 1×,
// 3× and 0.5× of capacity, client deadline 10·S. Each criterion is measured
// on the 40 seeds of criteriaSeeds (4 of them unless FLOODGATE_SIM is set),
// after a convergence budget of 30 windows, and the tests log the worst
// seed of each. Where a criterion misses, its test asserts what holds and
// says by how much it misses, and the docs state the measured worst case.
const (
	S      = 10 * time.Millisecond // service time
	window = 4 * S                 // the Windowed limit's window, and the series interval
	settle = 30 * window           // convergence budget
)

// criteriaSeeds returns the seeds the criteria run on. With FLOODGATE_SIM=1
// (or =compare) they are the 40 seeds the docs' figures come from: 0–19,
// the seeds the criteria were first written on, and 1001–1020, the seeds
// on which the review of issue 13 measured them again. With
// FLOODGATE_SIM=heldout they are 40 others, 20–39 and 1021–1040, on which
// no criterion was tuned: the figures must hold there too. By default they
// are 4 of the 40 (0, 1, 1001, 1002), so that go test ./... stays fast,
// and under the race detector 2 (0, 1001): it makes the runs about twenty
// times slower and has nothing to check in a simulation on one goroutine.
// CI runs the 40 without it (.ci/run).
func criteriaSeeds(t *testing.T) []uint64 {
	t.Helper()
	first, n := uint64(0), uint64(20)
	switch os.Getenv("FLOODGATE_SIM") {
	case "heldout":
		first = 20
	case "":
		n = 2
		if raceEnabled {
			n = 1
		}
		t.Logf("%d of the 40 seeds; FLOODGATE_SIM=1 runs all 40", 2*n)
	}
	var s []uint64
	for i := range n {
		s = append(s, first+i)
	}
	for i := range n {
		s = append(s, 1001+first+i)
	}
	return s
}

// worst tracks the worst value of a measurement over seeds, and the seed it
// came from: the least value when low is set (goodput), else the greatest
// (latency, shedding).
type worst struct {
	low  bool
	v    float64
	seed uint64
	n    int // values seen
}

func lowest() *worst  { return &worst{low: true} }
func highest() *worst { return &worst{} }

func (w *worst) add(seed uint64, v float64) {
	if w.n == 0 || (w.low && v < w.v) || (!w.low && v > w.v) {
		w.v, w.seed = v, seed
	}
	w.n++
}

// format gives the worst value to digits decimals, rounded towards the bad
// side (down for a least value, up for a greatest), then unit and the seed,
// so that a figure copied from the log into the docs never flatters the
// limiter.
func (w *worst) format(digits int, unit string) string {
	p := math.Pow(10, float64(digits))
	v := math.Ceil(w.v*p-1e-9) / p
	if w.low {
		v = math.Floor(w.v*p+1e-9) / p
	}
	if v == 0 {
		v = 0 // not -0
	}
	return fmt.Sprintf("%.*f%s (seed %d)", digits, v, unit, w.seed)
}

// windowedVegas builds the limiter under test: Windowed(Vegas) with Vegas's
// defaults and a fixed window, on the run's clock and random source.
func windowedVegas(opts *adaptive.LimiterOptions) func(Env) (*adaptive.Limiter, error) {
	return func(env Env) (*adaptive.Limiter, error) {
		v, err := adaptive.NewVegas(&adaptive.VegasOptions{Rand: env.Rand})
		if err != nil {
			return nil, err
		}
		w, err := adaptive.NewWindowed(v, &adaptive.WindowedOptions{MinWindow: window, MaxWindow: window})
		if err != nil {
			return nil, err
		}
		o := adaptive.LimiterOptions{}
		if opts != nil {
			o = *opts
		}
		o.Now = env.Now
		return adaptive.NewLimiter(w, &o)
	}
}

// standard is the four-phase scenario of the criteria.
func standard(seed uint64, workers int, service Distribution, limiter func(Env) (*adaptive.Limiter, error)) Config {
	return Config{
		Seed: seed, Workers: workers, ServiceTime: S, Service: service, Interval: window, Limiter: limiter,
		Phases: []Phase{
			{Name: "low", Duration: 60 * window, Load: 0.5},
			{Name: "full", Duration: 30 * window, Load: 1},
			{Name: "over", Duration: 70 * window, Load: 3},
			{Name: "recover", Duration: 60 * window, Load: 0.5},
		},
	}
}

// perSeed runs one simulation per seed, GOMAXPROCS at a time (runs are
// independent and deterministic, so their order does not matter), and
// returns measure's result for each run: out[i] is that of seeds[i].
// Assertions stay on the test goroutine.
func perSeed[T any](t *testing.T, seeds []uint64, config func(seed uint64) Config, measure func(*Result) T) []T {
	t.Helper()
	out := make([]T, len(seeds))
	errs := make([]error, len(seeds))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := Run(config(seed))
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = measure(r)
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoErrorf(t, err, "seed %d", seeds[i])
	}
	return out
}

// phases returns a measure function giving the settled Stats of the named
// phases.
func phases(names ...string) func(*Result) []Stats {
	return func(r *Result) []Stats {
		var out []Stats
		for _, name := range names {
			s, ok := r.Phase(name, settle)
			if !ok {
				panic("no phase " + name)
			}
			out = append(out, s)
		}
		return out
	}
}

// vegasBand is [C+alpha, C+beta] with Vegas's default log10-scaled alpha
// and beta: the queue Vegas keeps is alpha..beta requests.
func vegasBand(c int) (lo, hi int) {
	lg := 1
	if c >= 100 {
		lg = 2
	}
	return c + 3*lg, c + 6*lg
}

func TestVegasUnderOverload(t *testing.T) {
	// The median limit at 3x must lie in [C+alpha, C+beta] on every seed.
	// With the reference's lowest-sample baseline (BaselineSamples 1) it
	// does not with lognormal service: 21 (seed 1013) or 22 on 27 of the 40
	// seeds.
	assertUnderOverload(t, windowedVegas(nil), 3, vegasBand)
}

func TestCollapseBaseline(t *testing.T) {
	// With the collapse term, an unprotected server drowns at 3x while the
	// limiter keeps goodput near capacity.
	assertCollapseBaseline(t, windowedVegas(nil), 0.9)
}

func TestVegasFollowsCapacityStep(t *testing.T) {
	// C halves in the middle of the overload: the limit must enter the new
	// band within 20 windows and stay there. The band bounds every point of
	// the series here, not the median, so it keeps the reference notes'
	// tolerance of one request on either side.
	const c = 20
	lo, hi := vegasBand(c / 2)
	lo, hi = lo-1, hi+1
	type outcome struct {
		windows int // windows after the step until the limit entered the band
		halved  Stats
	}
	seeds := criteriaSeeds(t)
	for _, dist := range []Distribution{Deterministic, Lognormal} {
		runs := perSeed(t, seeds, func(seed uint64) Config {
			return Config{
				Seed: seed, Workers: c, ServiceTime: S, Service: dist, Interval: window, Limiter: windowedVegas(nil),
				Phases: []Phase{
					{Name: "low", Duration: 30 * window, Load: 0.5},
					{Name: "over", Duration: 40 * window, Load: 3},
					{Name: "halved", Duration: 50 * window, Load: 3, Workers: c / 2},
				},
			}
		}, func(r *Result) outcome {
			o := outcome{windows: -1, halved: phases("halved")(r)[0]}
			step := r.Phases[2].Start
			for _, p := range r.Series {
				if p.Time > step && p.Limit >= lo && p.Limit <= hi {
					o.windows = int((p.Time - step) / window)
					break
				}
			}
			return o
		})
		slowest := highest()
		for i, o := range runs {
			seed := seeds[i]
			assert.Truef(t, o.windows >= 0 && o.windows <= 20, "dist %d seed %d: limit entered [%d, %d] after %d windows, want <= 20",
				dist, seed, lo, hi, o.windows)
			assert.Truef(t, o.halved.LimitMin >= lo && o.halved.LimitMax <= hi,
				"dist %d seed %d: limit after the step in [%d, %d], want within [%d, %d]", dist, seed, o.halved.LimitMin, o.halved.LimitMax, lo, hi)
			slowest.add(seed, float64(o.windows))
		}
		t.Logf("%s distribution, %d seeds: limit in the new band after at most %s windows", distName[dist], len(seeds), slowest.format(0, ""))
	}
}

// distName names the service distributions in logs.
var distName = map[Distribution]string{Deterministic: "deterministic", Lognormal: "lognormal"}

// classGoodput returns the share of a class's offered requests that were
// good.
func classGoodput(s Stats, class string) float64 {
	c := s.Classes[class]
	return float64(c.Good) / float64(c.Offered)
}

func classShed(s Stats, class string) float64 {
	c := s.Classes[class]
	return float64(c.Rejected) / float64(c.Offered)
}

// partitions are the Partitions of the partition criteria: critical,
// guaranteed 70% of the limit and listed first, and sheddable, 30%.
func partitions(rule adaptive.PartitionRule) *adaptive.LimiterOptions {
	return &adaptive.LimiterOptions{PartitionRule: rule, Partitions: []adaptive.Partition{
		{Name: "critical", Share: 0.7}, {Name: "sheddable", Share: 0.3},
	}}
}

// partitionScenario offers critical and sheddable traffic, as multiples of
// capacity, to c workers behind Windowed(Vegas) with partitions: 20 windows
// at 0.5x, 60 windows of the mix ("over"), and 10 windows at 0.5x, so that
// every request of the mix finishes before the run ends.
func partitionScenario(seed uint64, c int, dist Distribution, critical, sheddable float64, rule adaptive.PartitionRule) Config {
	return Config{
		Seed: seed, Workers: c, ServiceTime: S, Service: dist, Interval: window, Limiter: windowedVegas(partitions(rule)),
		Classes: []Class{{Name: "critical", Weight: critical}, {Name: "sheddable", Weight: sheddable}},
		Phases: []Phase{
			{Name: "low", Duration: 20 * window, Load: 0.5},
			{Name: "over", Duration: 60 * window, Load: critical + sheddable},
			{Name: "after", Duration: 10 * window, Load: 0.5},
		},
	}
}

func TestPartitionProtectsCritical(t *testing.T) {
	// A partition guaranteed 70% of the limit, offered 0.5x or 0.7x of
	// capacity while a sheddable partition floods the server up to 3x in
	// all, must keep 95% of its requests. At 0.7x it holds, on average,
	// exactly its guarantee in flight (everything waits in one queue), so
	// Netflix's rule (PartitionReference), which caps it at its guarantee
	// once the limit is full, sheds its Poisson bursts: at 100 workers it
	// kept 0.7881 of its requests on the worst seed (deterministic
	// service), at 20 workers 0.7272. PartitionBurst lets it burst into the
	// sheddable guarantee.
	seeds := heavySeeds(t)
	for _, tc := range []struct {
		c        int
		critical float64
		dist     Distribution
	}{
		{20, 0.7, Deterministic}, {20, 0.7, Lognormal},
		{100, 0.5, Deterministic}, {100, 0.5, Lognormal},
		{100, 0.7, Deterministic}, {100, 0.7, Lognormal},
	} {
		t.Run(fmt.Sprintf("C=%d/%s/critical=%.1fx", tc.c, distName[tc.dist], tc.critical), func(t *testing.T) {
			runs := perSeed(t, seeds, func(seed uint64) Config {
				return partitionScenario(seed, tc.c, tc.dist, tc.critical, 3-tc.critical, adaptive.PartitionBurst)
			}, phases("over"))
			worst, shed := lowest(), highest()
			for i, st := range runs {
				seed, over := seeds[i], st[0]
				require.Zerof(t, over.Unfinished, "seed %d: requests of the mix unfinished", seed)
				g := classGoodput(over, "critical")
				assert.GreaterOrEqualf(t, g, 0.95, "seed %d: critical goodput = %.4f of offered, want >= 0.95", seed, g)
				assert.Greaterf(t, classShed(over, "sheddable"), 5*classShed(over, "critical"),
					"seed %d: shedding must fall on the sheddable partition", seed)
				worst.add(seed, g)
				shed.add(seed, classShed(over, "critical"))
			}
			t.Logf("%s, %d seeds: critical goodput >= %s of offered, critical shed <= %s",
				t.Name(), len(seeds), worst.format(4, ""), shed.format(4, ""))
		})
	}
}

func TestPartitionFloodKeepsLowerShare(t *testing.T) {
	// The other way round: the critical partition floods at 2x and the
	// sheddable one is offered 1x. Bursts must not let the critical
	// partition take the sheddable guarantee for good: out of credit, it is
	// held to its own, so the sheddable partition keeps most of its share
	// of capacity (0.3x). The reference rule keeps more (0.9908 of it on
	// the worst seed at 100 workers, 0.9694 at 20), since it never lets the
	// critical partition above its guarantee; the floors here say what
	// bursts cost.
	seeds := criteriaSeeds(t)
	for _, tc := range []struct {
		c     int
		floor float64
	}{{20, 0.8}, {100, 0.9}} {
		// Deterministic service: the worse of the two here (lognormal:
		// 0.8875 at 20 workers, 0.9708 at 100).
		t.Run(fmt.Sprintf("C=%d", tc.c), func(t *testing.T) {
			capacity := float64(tc.c) / S.Seconds()
			runs := perSeed(t, seeds, func(seed uint64) Config {
				return partitionScenario(seed, tc.c, Deterministic, 2, 1, adaptive.PartitionBurst)
			}, phases("over"))
			worst := lowest()
			for i, st := range runs {
				seed, over := seeds[i], st[0]
				share := float64(over.Classes["sheddable"].Good) / (over.To - over.From).Seconds() / (0.3 * capacity)
				assert.GreaterOrEqualf(t, share, tc.floor, "seed %d: sheddable goodput = %.4f of its share, want >= %.2f", seed, share, tc.floor)
				worst.add(seed, share)
			}
			t.Logf("%s, %d seeds: sheddable goodput >= %s of its share of capacity", t.Name(), len(seeds), worst.format(4, ""))
		})
	}
}

func TestCriticalityShedsLowestFirst(t *testing.T) {
	// Ordered mode at 3x: 0.7x critical, 0.3x default, 1x sheddable, 1x
	// background. Critical traffic is served; shedding falls on the classes
	// in reverse order of importance.
	const c = 20
	crit := &adaptive.LimiterOptions{Criticality: &adaptive.CriticalityOptions{}}
	seeds := criteriaSeeds(t)
	worst := lowest()
	runs := perSeed(t, seeds, func(seed uint64) Config {
		return Config{
			Seed: seed, Workers: c, ServiceTime: S, Interval: window, Limiter: windowedVegas(crit),
			Classes: []Class{
				{Name: adaptive.ClassCritical, Weight: 0.7}, {Name: adaptive.ClassDefault, Weight: 0.3},
				{Name: adaptive.ClassSheddable, Weight: 1}, {Name: adaptive.ClassBackground, Weight: 1},
			},
			Phases: []Phase{
				{Name: "low", Duration: 20 * window, Load: 0.5},
				{Name: "over", Duration: 60 * window, Load: 3},
			},
		}
	}, phases("over"))
	for i, st := range runs {
		seed, over := seeds[i], st[0]
		g := classGoodput(over, adaptive.ClassCritical)
		assert.GreaterOrEqualf(t, g, 0.95, "seed %d: critical goodput = %.4f of offered, want >= 0.95", seed, g)
		sheds := fmt.Sprintf("critical %.3f, default %.3f, sheddable %.3f, background %.3f",
			classShed(over, adaptive.ClassCritical), classShed(over, adaptive.ClassDefault),
			classShed(over, adaptive.ClassSheddable), classShed(over, adaptive.ClassBackground))
		assert.Truef(t, classShed(over, adaptive.ClassCritical) < classShed(over, adaptive.ClassDefault) &&
			classShed(over, adaptive.ClassDefault) < classShed(over, adaptive.ClassSheddable) &&
			classShed(over, adaptive.ClassSheddable) < classShed(over, adaptive.ClassBackground),
			"seed %d: shed rates %s, want increasing", seed, sheds)
		worst.add(seed, g)
	}
	t.Logf("%s, %d seeds: critical goodput >= %s of offered", t.Name(), len(seeds), worst.format(4, ""))
}
