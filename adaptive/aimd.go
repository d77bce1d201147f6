package adaptive

import (
	"math"
	"time"
)

// AIMDOptions configures NewAIMD. A nil *AIMDOptions, or a zero field, means
// the default, which matches Netflix concurrency-limits' AIMDLimit.
type AIMDOptions struct {
	// InitialLimit is the limit before any sample. The default is 20.
	InitialLimit int
	// MinLimit is the floor the limit never goes below. The default is 20;
	// it is lowered to InitialLimit when only InitialLimit is set below it.
	MinLimit int
	// MaxLimit is the ceiling the limit never goes above. The default is 200;
	// it is raised to InitialLimit when only InitialLimit is set above it.
	MaxLimit int
	// BackoffRatio multiplies the limit on a drop or timeout; it must lie in
	// [0.5, 1). The default is 0.9.
	BackoffRatio float64
	// Timeout is the RTT above which a sample counts as a drop even when it
	// was reported as a success. The default is 5s.
	//
	// Under overload AIMD grows the limit until samples exceed Timeout, so
	// the latency of admitted requests settles just below it, not near the
	// server's no-load latency: Timeout is the latency objective. Set it to
	// what clients may wait; about twice the no-load latency keeps the p99
	// within three times it (over the simulator's 40 seeds, a p99 of at
	// most 2.98x at Timeout = 2·S and 5.91x at Timeout = 5·S).
	Timeout time.Duration
}

// AIMD is a loss-based Limit: additive increase, multiplicative decrease, as
// in TCP Reno. It grows the limit by one for each sample taken while the
// limiter was at least half used (2·InFlight ≥ limit), and multiplies it by
// BackoffRatio on each dropped sample or sample slower than Timeout. It reacts
// to overload only once requests fail, so it needs drops (timeouts) to be
// reported; in exchange it is immune to noisy latency.
//
// The zero value is not usable; create one with NewAIMD. An AIMD is not safe
// for concurrent use: a Limiter serializes its calls (see Limit).
type AIMD struct {
	limit    int
	min, max int
	backoff  float64
	timeout  time.Duration
}

var _ Limit = (*AIMD)(nil)

// NewAIMD returns an AIMD limit configured by opts (nil means defaults).
func NewAIMD(opts *AIMDOptions) (*AIMD, error) {
	var o AIMDOptions
	if opts != nil {
		o = *opts
	}
	if o.InitialLimit < 0 || o.MinLimit < 0 || o.MaxLimit < 0 || o.Timeout < 0 {
		return nil, invalid("AIMDOptions has a negative field")
	}
	if o.InitialLimit == 0 {
		o.InitialLimit = 20
	}
	if o.MinLimit == 0 {
		o.MinLimit = min(20, o.InitialLimit)
	}
	if o.MaxLimit == 0 {
		o.MaxLimit = max(200, o.InitialLimit)
	}
	if o.BackoffRatio == 0 {
		o.BackoffRatio = 0.9
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if !(o.MinLimit <= o.InitialLimit && o.InitialLimit <= o.MaxLimit) {
		return nil, invalid("AIMDOptions needs MinLimit %d <= InitialLimit %d <= MaxLimit %d",
			o.MinLimit, o.InitialLimit, o.MaxLimit)
	}
	if !validRatio(o.BackoffRatio, 0.5, 1) || o.BackoffRatio == 1 {
		return nil, invalid("AIMDOptions.BackoffRatio %v not in [0.5, 1)", o.BackoffRatio)
	}
	return &AIMD{
		limit:   o.InitialLimit,
		min:     o.MinLimit,
		max:     o.MaxLimit,
		backoff: o.BackoffRatio,
		timeout: o.Timeout,
	}, nil
}

// Current returns the current limit.
func (a *AIMD) Current() int { return a.limit }

// Update applies one AIMD step for s and returns the new limit.
func (a *AIMD) Update(s Sample) int {
	l := a.limit
	switch {
	case s.Dropped || s.RTT > a.timeout:
		l = int(math.Floor(float64(l) * a.backoff))
	case 2*s.InFlight >= l:
		l++
	}
	a.limit = min(a.max, max(a.min, l))
	return a.limit
}
