package adaptive

import "math"

// Gradient2Options configures NewGradient2. A nil *Gradient2Options, or a
// zero field, means the default, which matches Netflix concurrency-limits'
// Gradient2Limit (BackoffRatio is this package's addition).
type Gradient2Options struct {
	// InitialLimit is the limit before any sample. The default is 20.
	InitialLimit int
	// MinLimit is the floor the limit never goes below. The default is 20;
	// it is lowered to InitialLimit when only InitialLimit is set below it.
	MinLimit int
	// MaxConcurrency is the ceiling the limit never goes above. The default
	// is 200; it is raised to InitialLimit when only InitialLimit is set
	// above it.
	MaxConcurrency int
	// Smoothing weighs each new limit against the old one:
	// limit = (1-Smoothing)·old + Smoothing·new. It must lie in (0, 1]. The
	// default is 0.2.
	Smoothing float64
	// QueueSize returns the headroom, in requests, added to the limit on each
	// update so that it keeps probing upwards. The default is 4 for any
	// limit.
	QueueSize func(limit int) int
	// LongWindow is the number of samples the long-term RTT average spans
	// (an exponential moving average with factor 2/(LongWindow+1), after a
	// plain average over the first 10 samples). The default is 600.
	LongWindow int
	// RTTTolerance is how much slower than the long-term average the current
	// RTT may be before the limit shrinks; it must be at least 1. The default
	// is 1.5.
	RTTTolerance float64
	// BackoffRatio multiplies the limit on a dropped sample; it must lie in
	// [0.5, 1]. The default is 0.9; 1 turns drop handling off, as in the
	// reference implementation.
	BackoffRatio float64
}

// Gradient2 is a delay-based Limit that compares the short-term RTT (the
// sample) with a long-term exponential average of RTTs. Their ratio, times a
// tolerance and clamped to [0.5, 1], is the gradient: 1 while latency is
// steady, lower while a queue builds. The next limit is limit·gradient plus a
// small queue allowance, smoothed. Because it needs no minimum RTT it copes
// with a baseline that drifts; the price is that under long, steady
// saturation the average catches up with the current RTT and the limit keeps
// creeping upwards, so pair it with drops (timeouts) or a MaxConcurrency.
//
// Unlike the reference implementation (whose Gradient2 ignores drops, Netflix
// concurrency-limits issue #176), a dropped sample multiplies the limit by
// BackoffRatio and leaves the long-term average alone: the RTT of a request
// that timed out measures the deadline, not the server.
//
// To damp runaway averages, the long-term average decays by 5% whenever it is
// more than twice the current RTT (the reference's drift recovery).
//
// The zero value is not usable; create one with NewGradient2. A Gradient2 is
// not safe for concurrent use: a Limiter serializes its calls (see Limit).
type Gradient2 struct {
	limit              float64
	minLimit, maxLimit int
	smoothing          float64
	queueSize          func(int) int
	tolerance          float64
	backoff            float64
	long               expAverage
}

var _ Limit = (*Gradient2)(nil)

// NewGradient2 returns a Gradient2 limit configured by opts (nil means
// defaults).
func NewGradient2(opts *Gradient2Options) (*Gradient2, error) {
	var o Gradient2Options
	if opts != nil {
		o = *opts
	}
	if o.InitialLimit < 0 || o.MinLimit < 0 || o.MaxConcurrency < 0 || o.LongWindow < 0 {
		return nil, invalid("Gradient2Options has a negative field")
	}
	if o.InitialLimit == 0 {
		o.InitialLimit = 20
	}
	if o.MinLimit == 0 {
		o.MinLimit = min(20, o.InitialLimit)
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = max(200, o.InitialLimit)
	}
	if !(o.MinLimit <= o.InitialLimit && o.InitialLimit <= o.MaxConcurrency) {
		return nil, invalid("Gradient2Options needs MinLimit %d <= InitialLimit %d <= MaxConcurrency %d",
			o.MinLimit, o.InitialLimit, o.MaxConcurrency)
	}
	if o.Smoothing == 0 {
		o.Smoothing = 0.2
	}
	if !validRatio(o.Smoothing, 0, 1) {
		return nil, invalid("Gradient2Options.Smoothing %v not in (0, 1]", o.Smoothing)
	}
	if o.QueueSize == nil {
		o.QueueSize = func(int) int { return 4 }
	}
	if o.LongWindow == 0 {
		o.LongWindow = 600
	}
	if o.RTTTolerance == 0 {
		o.RTTTolerance = 1.5
	}
	if math.IsNaN(o.RTTTolerance) || math.IsInf(o.RTTTolerance, 0) || o.RTTTolerance < 1 {
		return nil, invalid("Gradient2Options.RTTTolerance %v not a finite number >= 1", o.RTTTolerance)
	}
	if o.BackoffRatio == 0 {
		o.BackoffRatio = 0.9
	}
	if !validRatio(o.BackoffRatio, 0.5, 1) {
		return nil, invalid("Gradient2Options.BackoffRatio %v not in [0.5, 1]", o.BackoffRatio)
	}
	return &Gradient2{
		limit:     float64(o.InitialLimit),
		minLimit:  o.MinLimit,
		maxLimit:  o.MaxConcurrency,
		smoothing: o.Smoothing,
		queueSize: o.QueueSize,
		tolerance: o.RTTTolerance,
		backoff:   o.BackoffRatio,
		long:      expAverage{window: o.LongWindow, warmup: 10},
	}, nil
}

// Current returns the current limit.
func (g *Gradient2) Current() int { return max(1, int(g.limit)) }

// Update folds s into the estimate and returns the new limit. Samples with an
// RTT of 0 are ignored.
func (g *Gradient2) Update(s Sample) int {
	if s.RTT <= 0 {
		return g.Current()
	}
	if s.Dropped {
		if g.backoff < 1 {
			g.limit = clampFloat(g.limit*g.backoff, float64(g.minLimit), float64(g.maxLimit))
		}
		return g.Current()
	}
	short := float64(s.RTT)
	long := g.long.add(short)
	if long/short > 2 {
		// Drift recovery: the average is far above what the server does now
		// (for example after a burst of slow requests), so let it fall faster
		// than the moving average alone would. The comparison below still
		// uses the undecayed value, as the reference does.
		g.long.value *= 0.95
	}
	if float64(s.InFlight) < g.limit/2 {
		// Application-limited: see Vegas.
		return g.Current()
	}
	gradient := clampFloat(g.tolerance*long/short, 0.5, 1)
	next := g.limit*gradient + float64(g.queueSize(int(g.limit)))
	next = (1-g.smoothing)*g.limit + g.smoothing*next
	g.limit = clampFloat(next, float64(g.minLimit), float64(g.maxLimit))
	return g.Current()
}

// expAverage is an exponential moving average over window samples that
// starts as a plain mean of the first warmup samples, so that it does not
// begin at zero (Netflix ExpAvgMeasurement).
type expAverage struct {
	window, warmup int
	count          int
	sum, value     float64
}

func (e *expAverage) add(x float64) float64 {
	if e.count < e.warmup {
		e.count++
		e.sum += x
		e.value = e.sum / float64(e.count)
		return e.value
	}
	f := 2 / float64(e.window+1)
	e.value = e.value*(1-f) + x*f
	return e.value
}
