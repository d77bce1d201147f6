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
	rttNoLoad       time.Duration
}

var _ Limit = (*Vegas)(nil)

// NewVegas returns a Vegas limit configured by opts (nil means defaults).
func NewVegas(opts *VegasOptions) (*Vegas, error) {
	var o VegasOptions
	if opts != nil {
		o = *opts
	}
	if o.InitialLimit < 0 || o.MaxConcurrency < 0 || o.ProbeMultiplier < 0 {
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
	// Probe: every so often forget the no-load RTT and take this sample's RTT
	// instead, so that the baseline can rise after a real shift (a slower
	// dependency, a new deployment). Between probes it only falls.
	v.probeCount++
	if v.probeJitter*float64(v.probeMultiplier)*v.limit <= float64(v.probeCount) {
		v.resetProbeJitter()
		v.rttNoLoad = s.RTT
		return v.Current()
	}
	if v.rttNoLoad == 0 || s.RTT < v.rttNoLoad {
		v.rttNoLoad = s.RTT
		return v.Current()
	}

	l := int(v.limit)
	queue := int(math.Ceil(v.limit * (1 - float64(v.rttNoLoad)/float64(s.RTT))))
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

// resetProbeJitter starts a new probe period with jitter in [0.5, 1).
func (v *Vegas) resetProbeJitter() {
	v.probeJitter = 0.5 + v.rand()/2
	v.probeCount = 0
}
