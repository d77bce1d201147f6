package sim

import (
	"fmt"
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
// 3× and 0.5× of capacity, client deadline 10·S. Each criterion holds for
// every one of 20 seeds, measured after a convergence budget of 30 windows.
const (
	seeds  = 20
	S      = 10 * time.Millisecond // service time
	window = 4 * S                 // the Windowed limit's window, and the series interval
	settle = 30 * window           // convergence budget
)

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
// returns measure's result for each run, indexed by seed. Assertions stay on
// the test goroutine.
func perSeed[T any](t *testing.T, n uint64, config func(seed uint64) Config, measure func(*Result) T) []T {
	t.Helper()
	out := make([]T, n)
	errs := make([]error, n)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for seed := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := Run(config(seed))
			if err != nil {
				errs[seed] = err
				return
			}
			out[seed] = measure(r)
		})
	}
	wg.Wait()
	for seed, err := range errs {
		require.NoErrorf(t, err, "seed %d", seed)
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

// vegasBand is [C+alpha-1, C+beta+1] with Vegas's default log10-scaled
// alpha and beta: the queue Vegas keeps is alpha..beta requests.
func vegasBand(c int) (lo, hi int) {
	lg := 1
	if c >= 100 {
		lg = 2
	}
	return c + 3*lg - 1, c + 6*lg + 1
}

func TestVegasUnderOverload(t *testing.T) {
	assertUnderOverload(t, windowedVegas(nil), 3, vegasBand)
}

func TestCollapseBaseline(t *testing.T) {
	// With the collapse term, an unprotected server drowns at 3x while the
	// limiter keeps goodput near capacity.
	const c = 20
	capacity := float64(c) / S.Seconds()
	config := func(limiter func(Env) (*adaptive.Limiter, error)) func(uint64) Config {
		return func(seed uint64) Config {
			cfg := standard(seed, c, Deterministic, limiter)
			cfg.Collapse = 0.5
			return cfg
		}
	}
	protected := perSeed(t, seeds, config(windowedVegas(nil)), phases("over"))
	unprotected := perSeed(t, seeds, config(nil), phases("over"))
	minWith, maxWithout := 1e9, 0.0
	defer func() {
		t.Logf("goodput at 3x with collapse: limiter >= %.3f, no limiter <= %.3f of capacity", minWith, maxWithout)
	}()
	for seed := range protected {
		with := protected[seed][0].Goodput / capacity
		without := unprotected[seed][0].Goodput / capacity
		minWith, maxWithout = min(minWith, with), max(maxWithout, without)
		assert.GreaterOrEqualf(t, with, 0.9, "seed %d: goodput with limiter and collapse = %.3f, want >= 0.9", seed, with)
		assert.Lessf(t, without, 0.5*with, "seed %d: goodput without limiter = %.3f, want clearly below %.3f", seed, without, with)
	}
}

func TestVegasFollowsCapacityStep(t *testing.T) {
	// C halves in the middle of the overload: the limit must enter the new
	// band within 20 windows and stay there.
	const c = 20
	lo, hi := vegasBand(c / 2)
	type outcome struct {
		windows int // windows after the step until the limit entered the band
		halved  Stats
	}
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
		slowest := 0
		for seed, o := range runs {
			assert.Truef(t, o.windows >= 0 && o.windows <= 20, "dist %d seed %d: limit entered [%d, %d] after %d windows, want <= 20",
				dist, seed, lo, hi, o.windows)
			assert.Truef(t, o.halved.LimitMin >= lo && o.halved.LimitMax <= hi,
				"dist %d seed %d: limit after the step in [%d, %d], want within [%d, %d]", dist, seed, o.halved.LimitMin, o.halved.LimitMax, lo, hi)
			slowest = max(slowest, o.windows)
		}
		t.Logf("distribution %d: limit in the new band after at most %d windows", dist, slowest)
	}
}

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

func TestPartitionProtectsCritical(t *testing.T) {
	// A partition guaranteed 70% of the limit, offered 0.5x capacity while
	// a sheddable partition floods the server with 2.5x. Netflix's rule
	// caps critical traffic at ceil(0.7·L) in flight once the limit is full,
	// so Poisson bursts above the cap are shed: the guarantee needs headroom
	// over the partition's mean demand. At 0.5x (mean demand about half the
	// limit) and C = 100 the loss stays under 5%; at 0.7x it is 15-20% (an
	// Erlang loss at a cap equal to the mean), which is what the ordered
	// criticality mode below is for.
	const c = 100
	if testing.Short() {
		t.Log("short mode: 5 seeds")
	}
	n := uint64(seeds)
	if testing.Short() {
		n = 5
	}
	parts := &adaptive.LimiterOptions{Partitions: []adaptive.Partition{{Name: "critical", Share: 0.7}, {Name: "sheddable", Share: 0.3}}}
	worst := 1.0
	runs := perSeed(t, n, func(seed uint64) Config {
		return Config{
			Seed: seed, Workers: c, ServiceTime: S, Interval: window, Limiter: windowedVegas(parts),
			Classes: []Class{{Name: "critical", Weight: 0.5}, {Name: "sheddable", Weight: 2.5}},
			Phases: []Phase{
				{Name: "low", Duration: 20 * window, Load: 0.5},
				{Name: "over", Duration: 60 * window, Load: 3},
			},
		}
	}, phases("over"))
	for seed, st := range runs {
		over := st[0]
		g := classGoodput(over, "critical")
		assert.GreaterOrEqualf(t, g, 0.95, "seed %d: critical goodput = %.4f of offered, want >= 0.95", seed, g)
		assert.Greaterf(t, classShed(over, "sheddable"), 5*classShed(over, "critical"), "seed %d: shedding must fall on the sheddable partition", seed)
		worst = min(worst, g)
	}
	t.Logf("critical goodput >= %.4f of offered", worst)
}

func TestCriticalityShedsLowestFirst(t *testing.T) {
	// Ordered mode at 3x: 0.7x critical, 0.3x default, 1x sheddable, 1x
	// background. Critical traffic is served; shedding falls on the classes
	// in reverse order of importance.
	const c = 20
	crit := &adaptive.LimiterOptions{Criticality: &adaptive.CriticalityOptions{}}
	worst := 1.0
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
	for seed, st := range runs {
		over := st[0]
		g := classGoodput(over, adaptive.ClassCritical)
		assert.GreaterOrEqualf(t, g, 0.95, "seed %d: critical goodput = %.4f of offered, want >= 0.95", seed, g)
		sheds := fmt.Sprintf("critical %.3f, default %.3f, sheddable %.3f, background %.3f",
			classShed(over, adaptive.ClassCritical), classShed(over, adaptive.ClassDefault),
			classShed(over, adaptive.ClassSheddable), classShed(over, adaptive.ClassBackground))
		assert.Truef(t, classShed(over, adaptive.ClassCritical) < classShed(over, adaptive.ClassDefault) &&
			classShed(over, adaptive.ClassDefault) < classShed(over, adaptive.ClassSheddable) &&
			classShed(over, adaptive.ClassSheddable) < classShed(over, adaptive.ClassBackground),
			"seed %d: shed rates %s, want increasing", seed, sheds)
		worst = min(worst, g)
	}
	t.Logf("critical goodput >= %.4f of offered", worst)
}
