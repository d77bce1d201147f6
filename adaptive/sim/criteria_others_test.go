package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/stretchr/testify/assert"
)

// The acceptance criteria of criteria_test.go, held against the other two
// adaptive limits: Windowed(Gradient2) and Windowed(AIMD), configured as
// examples/adaptive runs them (MinLimit 1; for AIMD a Timeout of 5·S, since
// the default 5s suits services 500 times slower than S), each behind
// Windowed with the criteria's fixed window, as doc.go recommends for
// servers. The scenario, seeds, convergence budget and server are those of
// the Vegas tests.
//
// The criteria, in the 3x phase after the budget: goodput >= 0.9 of
// capacity, admitted p99 <= 3·S and no late requests; at 0.5x, false
// shedding < 0.1%; with the collapse term, goodput clearly above an
// unprotected server's. Where an algorithm cannot meet one, its test says
// which, by how much and why, and asserts the bound the algorithm does keep
// instead.

// windowedLimit builds Windowed(newLimit()) with the criteria's window on
// the run's clock.
func windowedLimit(newLimit func() (adaptive.Limit, error)) func(Env) (*adaptive.Limiter, error) {
	return func(env Env) (*adaptive.Limiter, error) {
		l, err := newLimit()
		if err != nil {
			return nil, err
		}
		w, err := adaptive.NewWindowed(l, &adaptive.WindowedOptions{MinWindow: window, MaxWindow: window})
		if err != nil {
			return nil, err
		}
		return adaptive.NewLimiter(w, &adaptive.LimiterOptions{Now: env.Now})
	}
}

// windowedGradient2 is Windowed(Gradient2) with Gradient2's defaults but
// MinLimit 1, as in examples/adaptive.
func windowedGradient2() func(Env) (*adaptive.Limiter, error) {
	return windowedLimit(func() (adaptive.Limit, error) {
		return adaptive.NewGradient2(&adaptive.Gradient2Options{MinLimit: 1})
	})
}

// windowedAIMD is Windowed(AIMD) with AIMD's defaults but MinLimit 1 and
// the given Timeout.
func windowedAIMD(timeout time.Duration) func(Env) (*adaptive.Limiter, error) {
	return windowedLimit(func() (adaptive.Limit, error) {
		return adaptive.NewAIMD(&adaptive.AIMDOptions{MinLimit: 1, Timeout: timeout})
	})
}

// limitBand gives the band [lo, hi] the median limit at 3x must lie in, for
// a capacity of C workers.
type limitBand func(c int) (lo, hi int)

// assertUnderOverload runs the four-phase scenario on the criteria's seeds
// for each service distribution and checks the 3x criteria, with maxP99 (in
// units of S) as the latency bound, and the false-shedding criterion at
// 0.5x. A non-nil band also bounds the median limit at 3x, given the
// capacity C.
func assertUnderOverload(t *testing.T, limiter func(Env) (*adaptive.Limiter, error), maxP99 float64, band limitBand) {
	t.Helper()
	const c = 20
	capacity := float64(c) / S.Seconds()
	seeds := criteriaSeeds(t)
	for _, dist := range []struct {
		name string
		d    Distribution
	}{{"deterministic", Deterministic}, {"lognormal", Lognormal}} {
		t.Run(dist.name, func(t *testing.T) {
			minGood, worstP99, maxShed := lowest(), highest(), highest()
			minL, maxL := lowest(), highest()
			runs := perSeed(t, seeds, func(seed uint64) Config {
				return standard(seed, c, dist.d, limiter)
			}, phases("over", "low", "recover"))
			for i, st := range runs {
				seed, over := seeds[i], st[0]
				if band != nil {
					lo, hi := band(c)
					assert.Truef(t, over.LimitMedian >= lo && over.LimitMedian <= hi,
						"seed %d: median limit at 3x = %d (from %d to %d), want in [%d, %d]", seed, over.LimitMedian, over.LimitMin, over.LimitMax, lo, hi)
				}
				good := over.Goodput / capacity
				assert.GreaterOrEqualf(t, good, 0.9, "seed %d: goodput at 3x = %.3f of capacity, want >= 0.9", seed, good)
				p99 := float64(over.P99) / float64(S)
				assert.LessOrEqualf(t, p99, maxP99, "seed %d: admitted p99 at 3x = %.2f·S, want <= %.2f·S", seed, p99, maxP99)
				assert.Zerof(t, over.Late, "seed %d: late requests at 3x", seed)
				for _, s := range st[1:] {
					shed := float64(s.Rejected) / float64(s.Offered)
					assert.Lessf(t, shed, 0.001, "seed %d: false shedding at 0.5x = %.4f, want < 0.001", seed, shed)
					maxShed.add(seed, shed)
				}
				minGood.add(seed, good)
				worstP99.add(seed, p99)
				minL.add(seed, float64(over.LimitMedian))
				maxL.add(seed, float64(over.LimitMedian))
			}
			t.Logf("%s, %d seeds at 3x: median limit from %s to %s, goodput >= %s of capacity, p99 <= %s; shed at 0.5x <= %s",
				t.Name(), len(seeds), minL.format(0, ""), maxL.format(0, ""), minGood.format(4, ""), worstP99.format(2, "·S"), maxShed.format(4, ""))
		})
	}
}

// assertCollapseBaseline runs the scenario with the collapse term κ = 0.5
// and deterministic service, with the limiter and without one, and checks
// that the limiter keeps goodput at 3x at least floor (a share of capacity)
// and at least twice an unprotected server's.
func assertCollapseBaseline(t *testing.T, limiter func(Env) (*adaptive.Limiter, error), floor float64) {
	t.Helper()
	const c = 20
	capacity := float64(c) / S.Seconds()
	seeds := criteriaSeeds(t)
	config := func(limiter func(Env) (*adaptive.Limiter, error)) func(uint64) Config {
		return func(seed uint64) Config {
			cfg := standard(seed, c, Deterministic, limiter)
			cfg.Collapse = 0.5
			return cfg
		}
	}
	protected := perSeed(t, seeds, config(limiter), phases("over"))
	unprotected := perSeed(t, seeds, config(nil), phases("over"))
	minWith, maxWithout := lowest(), highest()
	for i := range protected {
		seed := seeds[i]
		with := protected[i][0].Goodput / capacity
		without := unprotected[i][0].Goodput / capacity
		minWith.add(seed, with)
		maxWithout.add(seed, without)
		assert.GreaterOrEqualf(t, with, floor, "seed %d: goodput with limiter and collapse = %.3f, want >= %.3f", seed, with, floor)
		assert.Lessf(t, without, 0.5*with, "seed %d: goodput without limiter = %.3f, want clearly below %.3f", seed, without, with)
	}
	t.Logf("%s, %d seeds, goodput at 3x with collapse: limiter >= %s, no limiter <= %s of capacity", t.Name(), len(seeds), minWith.format(4, ""), maxWithout.format(4, ""))
}

func TestGradient2UnderOverload(t *testing.T) {
	// Gradient2 settles where limit·gradient + 4 = limit, with gradient =
	// 1.5·long/short and the long average still close to the no-load RTT S
	// (its 600 windows span more than the whole run): short ≈
	// 1.5·long·L/(L-4), a limit near 2C and latency near 2·S. The lognormal
	// tail brings the worst p99 close to the 3·S bound (2.98·S over the 40
	// seeds).
	assertUnderOverload(t, windowedGradient2(), 3, nil)
}

func TestAIMDUnderOverload(t *testing.T) {
	// AIMD is loss-based: it adds one to the limit per saturated window and
	// cuts it by 10% when a window's average RTT exceeds Timeout (or a request is
	// late), so it holds the latency of admitted requests just under its
	// Timeout, whatever the server's knee. With the Timeout of
	// examples/adaptive, 5·S, the admitted p99 at 3x is at most 5.21·S
	// (deterministic) and 5.91·S (lognormal) over the 40 seeds: the
	// criterion p99 <= 3·S does NOT hold, by a factor of about 1.7 to 2.
	// No change to the algorithm
	// fixes that without making it delay-based, and its default Timeout
	// (5s, Netflix's) is pinned by TestAIMDDefaults. So the 5·S case
	// asserts the bound AIMD does keep, p99 <= 1.25·Timeout, and the 2·S
	// case shows that a Timeout set to the latency objective meets the 3·S
	// criterion (AIMDOptions.Timeout says so).
	for _, tc := range []struct {
		timeout time.Duration
		maxP99  float64 // in units of S
	}{
		{5 * S, 1.25 * 5},
		{2 * S, 3},
	} {
		t.Run(fmt.Sprintf("timeout=%dS", tc.timeout/S), func(t *testing.T) {
			assertUnderOverload(t, windowedAIMD(tc.timeout), tc.maxP99, nil)
		})
	}
}

func TestGradient2CollapseBaseline(t *testing.T) {
	// The limiter beats an unprotected server by far, but Gradient2 does not
	// reach the 0.9 of capacity that Vegas keeps under collapse: it lets
	// the RTT rise to RTTTolerance (1.5) times the long average before it
	// shrinks, so it holds about C/2 requests queued, and each request that
	// starts service with n-C queued behind the workers takes
	// 1+κ·(n-C)/C longer. Solving 1.5·C/(L-4) = 1+κ·(L-C)/C for C = 20,
	// κ = 0.5 gives L ≈ 29 and goodput 1/(1+0.5·9/20) ≈ 0.82 (0.8100 on
	// the worst of the 40 seeds). Only a lower RTTTolerance would move it, and the default
	// is the reference's, pinned by TestGradient2 and TestGradient2Defaults.
	assertCollapseBaseline(t, windowedGradient2(), 0.8)
}

func TestAIMDCollapseBaseline(t *testing.T) {
	// AIMD holds the RTT near its Timeout, so under collapse the queue it
	// keeps slows the server down: solving L·(1+κ·(L-C)/C)·S/C = Timeout
	// gives goodput ≈ 0.54 of capacity at a Timeout of 5·S and ≈ 0.78 at
	// 2·S (the sawtooth below the Timeout does slightly better: 0.5781 and
	// 0.8259 on the worst of the 40 seeds). Both are far above an
	// unprotected server's, neither reaches the 0.9 Vegas keeps.
	for _, tc := range []struct {
		timeout time.Duration
		floor   float64
	}{
		{5 * S, 0.5},
		{2 * S, 0.75},
	} {
		t.Run(fmt.Sprintf("timeout=%dS", tc.timeout/S), func(t *testing.T) {
			assertCollapseBaseline(t, windowedAIMD(tc.timeout), tc.floor)
		})
	}
}
