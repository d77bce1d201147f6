package adaptive

import (
	"math"
	"math/rand/v2"
	"time"
)

// VegasOptions configures NewVegas. A nil *VegasOptions, or a zero field,
// means the default, which matches Netflix concurrency-limits' VegasLimit.
type VegasOptions struct {
	// InitialLimit is the limit before any sample. The default is 20.
	InitialLimit int
	// MaxConcurrency is the ceiling the limit never goes above. The default
	// is 1000; it is raised to InitialLimit when only InitialLimit is set
	// above it.
	MaxConcurrency int
	// Smoothing weighs each new limit against the old one:
	// limit = (1-Smoothing)·old + Smoothing·new. It must lie in (0, 1]. The
	// default is 1 (no smoothing).
	Smoothing float64
	// ProbeMultiplier sets how often the no-load RTT is re-measured: after
	// jitter·ProbeMultiplier·limit samples, jitter uniform in [0.5, 1). The
	// default is 30.
	ProbeMultiplier int
	// Alpha, Beta and Threshold map the current limit to the queue sizes
	// (in requests) that steer the limit: below Threshold the limit jumps by
	// Beta, below Alpha it increases, above Beta it decreases. The defaults
	// are 3·lg(limit), 6·lg(limit) and lg(limit), where
	// lg(x) = max(1, floor(log10(x))).
	Alpha, Beta, Threshold func(limit int) int
	// Increase and Decrease compute the next limit when the queue is short or
	// long. The defaults are limit+lg(limit) and limit-lg(limit).
	Increase, Decrease func(limit float64) float64
	// BaselineSamples is how many samples the no-load RTT averages: it is
	// the lowest value a running average of the samples has taken (their
	// plain mean over the first BaselineSamples, then an exponential
	// average with weight 2/(BaselineSamples+1)); until BaselineSamples
	// samples have arrived it is the lowest single sample. 1 gives the
	// reference's rule, the lowest single sample throughout: the lowest of
	// noisy samples lies below their mean, and Vegas reads the difference
	// as a queue, so with a spread of service times the reference settles
	// below its band (see Vegas). A larger value is steadier but learns a
	// lower baseline more slowly. The default is 20.
	BaselineSamples int
	// Rand returns uniform numbers in [0, 1) for the probe jitter. The
	// default is math/rand/v2's Float64. Inject a seeded source in tests.
	Rand func() float64
}

// Vegas is a delay-based Limit modelled on TCP Vegas. It keeps the lowest RTT
// seen (the no-load RTT) and estimates the queue the server is building as
// ceil(limit·(1 - rttNoLoad/rtt)): the share of the limit that is waiting
// rather than being served. A queue below Alpha grows the limit, above Beta
// shrinks it, so a saturated server settles with about Alpha..Beta requests
// queued. It reacts before requests fail, and holds latency near the no-load
// RTT; it trusts the no-load RTT, which it re-measures only occasionally.
//
// The no-load RTT differs from the reference's (Netflix's VegasLimit). The
// reference takes the lowest sample; samples are noisy (a window's average
// RTT varies with the requests that happened to fall in it), and the
// lowest of many noisy samples lies below the RTT the server really has at
// no load, by about two of their standard deviations. Vegas reads that gap
// as a queue of limit·gap/rtt requests and settles that much below its
// band. In the simulator (adaptive/sim, Windowed(Vegas), lognormal service
// with σ = 0.3), the reference's median limit at 3x overload sat at 21–23
// for a band of 23–26 at 20 workers, and anywhere from 28 to 106 for a band
// of 106–112 at 100 workers. This Vegas takes the lowest value of a running
// average of BaselineSamples samples instead, whose noise is less than a
// quarter of a sample's; it stays in its band on each of 240 seeds (0–199
// and 1001–1040) at both sizes. Until that many samples have arrived, and
// with BaselineSamples set to 1, it follows the reference, and the
// reference's test vectors hold.
//
// The zero value is not usable; create one with NewVegas. A Vegas is not safe
// for concurrent use: a Limiter serializes its calls (see Limit).
type Vegas struct {
	limit     float64
	maxLimit  int
	smoothing float64

	alpha, beta, threshold func(int) int
	increase, decrease     func(float64) float64

	rand            func() float64
	probeMultiplier int
	probeJitter     float64
	probeCount      int
	rttNoLoad       time.Duration // lowest sample since the last probe

	// The smoothed baseline (see average): avg is the running average of
	// the samples, over avgCount of them during the warm-up; lowAvg its
	// lowest value since the warm-up or the last probe.
	baselineN int
	avgCount  int
	avg       float64
	lowAvg    float64
}

var _ Limit = (*Vegas)(nil)

// NewVegas returns a Vegas limit configured by opts (nil means defaults).
func NewVegas(opts *VegasOptions) (*Vegas, error) {
	var o VegasOptions
	if opts != nil {
		o = *opts
	}
	if o.InitialLimit < 0 || o.MaxConcurrency < 0 || o.ProbeMultiplier < 0 || o.BaselineSamples < 0 {
		return nil, invalid("VegasOptions has a negative field")
	}
	if o.InitialLimit == 0 {
		o.InitialLimit = 20
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = max(1000, o.InitialLimit)
	}
	if o.InitialLimit > o.MaxConcurrency {
		return nil, invalid("VegasOptions.InitialLimit %d > MaxConcurrency %d", o.InitialLimit, o.MaxConcurrency)
	}
	if o.Smoothing == 0 {
		o.Smoothing = 1
	}
	if !validRatio(o.Smoothing, 0, 1) {
		return nil, invalid("VegasOptions.Smoothing %v not in (0, 1]", o.Smoothing)
	}
	if o.ProbeMultiplier == 0 {
		o.ProbeMultiplier = 30
	}
	if o.Alpha == nil {
		o.Alpha = func(l int) int { return 3 * lg(l) }
	}
	if o.Beta == nil {
		o.Beta = func(l int) int { return 6 * lg(l) }
	}
	if o.Threshold == nil {
		o.Threshold = lg
	}
	if o.Increase == nil {
		o.Increase = func(l float64) float64 { return l + float64(lg(int(l))) }
	}
	if o.Decrease == nil {
		o.Decrease = func(l float64) float64 { return l - float64(lg(int(l))) }
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.BaselineSamples == 0 {
		o.BaselineSamples = 20
	}
	v := &Vegas{
		limit:           float64(o.InitialLimit),
		maxLimit:        o.MaxConcurrency,
		smoothing:       o.Smoothing,
		alpha:           o.Alpha,
		beta:            o.Beta,
		threshold:       o.Threshold,
		increase:        o.Increase,
		decrease:        o.Decrease,
		rand:            o.Rand,
		probeMultiplier: o.ProbeMultiplier,
		baselineN:       o.BaselineSamples,
	}
	v.resetProbeJitter()
	return v, nil
}

// Current returns the current limit.
func (v *Vegas) Current() int { return max(1, int(v.limit)) }

// Update folds s into the estimate and returns the new limit. Samples with an
// RTT of 0 carry no delay information and are ignored.
func (v *Vegas) Update(s Sample) int {
	if s.RTT <= 0 {
		return v.Current()
	}
	v.average(s.RTT)
	// Probe: every so often forget the no-load RTT and take this sample's RTT
	// (and the current average) instead, so that the baseline can rise after
	// a real shift (a slower dependency, a new deployment). Between probes
	// it only falls.
	v.probeCount++
	if v.probeJitter*float64(v.probeMultiplier)*v.limit <= float64(v.probeCount) {
		v.resetProbeJitter()
		v.rttNoLoad = s.RTT
		v.lowAvg = v.avg
		return v.Current()
	}
	if v.rttNoLoad == 0 || s.RTT < v.rttNoLoad {
		// The reference's rule for the lowest-sample baseline: a new lowest
		// sample moves the baseline and nothing else. Against the smoothed
		// baseline a faster sample is only a sample without a queue, and
		// counts as one below.
		v.rttNoLoad = s.RTT
		if !v.smoothed() {
			return v.Current()
		}
	}
	noLoad := v.baseline()

	l := int(v.limit)
	queue := int(math.Ceil(v.limit * (1 - noLoad/float64(s.RTT))))
	var next float64
	switch {
	case s.Dropped:
		next = v.decrease(v.limit)
	case 2*s.InFlight < l:
		// Application-limited: the limit is not what holds traffic back, so
		// latency says nothing about it. Growing here would let the limit
		// drift far above what the server can take.
		return v.Current()
	case queue <= v.threshold(l):
		next = v.limit + float64(v.beta(l))
	case queue < v.alpha(l):
		next = v.increase(v.limit)
	case queue > v.beta(l):
		next = v.decrease(v.limit)
	default:
		return v.Current()
	}
	next = clampFloat(next, 1, float64(v.maxLimit))
	v.limit = (1-v.smoothing)*v.limit + v.smoothing*next
	return v.Current()
}

// average folds rtt into the smoothed baseline: the plain mean of the first
// baselineN samples, then an exponential average with weight
// 2/(baselineN+1) (the scheme of Gradient2's long average), and the lowest
// value it took since the end of the warm-up or the last probe.
func (v *Vegas) average(rtt time.Duration) {
	x := float64(rtt)
	if v.avgCount < v.baselineN {
		v.avgCount++
		v.avg += (x - v.avg) / float64(v.avgCount)
		v.lowAvg = v.avg
		return
	}
	v.avg += 2 / float64(v.baselineN+1) * (x - v.avg)
	v.lowAvg = min(v.lowAvg, v.avg)
}

// smoothed reports whether the queue is estimated against the smoothed
// baseline: after the warm-up, unless BaselineSamples is 1 (then the
// average is the last sample and the lowest sample is the baseline, as in
// the reference).
func (v *Vegas) smoothed() bool {
	return v.baselineN > 1 && v.avgCount == v.baselineN
}

// baseline returns the no-load RTT the queue is estimated against.
func (v *Vegas) baseline() float64 {
	if v.smoothed() {
		return v.lowAvg
	}
	return float64(v.rttNoLoad)
}

// resetProbeJitter starts a new probe period with jitter in [0.5, 1).
func (v *Vegas) resetProbeJitter() {
	v.probeJitter = 0.5 + v.rand()/2
	v.probeCount = 0
}
