package adaptive

import (
	"math"
	"slices"
	"time"
)

// WindowedOptions configures NewWindowed. A nil *WindowedOptions, or a zero
// field, means the default, which matches Netflix concurrency-limits'
// WindowedLimit.
type WindowedOptions struct {
	// MinWindow and MaxWindow bound the length of a window, which is twice
	// the lowest RTT seen in the previous window. Both default to 1s; the
	// reference requires at least 100ms, this package only requires them to
	// be positive so that simulations can run short windows.
	MinWindow, MaxWindow time.Duration
	// MinSamples is the number of samples a window needs before it is passed
	// on; a window with fewer is discarded. The default is 10.
	MinSamples int
	// MinRTT discards samples faster than it (cache hits, requests that
	// failed fast), which would otherwise drag the RTT down. The default is
	// 100µs.
	MinRTT time.Duration
	// Percentile, when set in (0, 1), makes a window report that percentile
	// of its RTTs (nearest rank) instead of their average. The default, 0, is
	// the average.
	Percentile float64
	// MaxSamples is how many RTTs a percentile window keeps; later samples in
	// the same window still count towards MinSamples, InFlight and Dropped,
	// but their RTTs are not ranked. Memory is MaxSamples·8 bytes, allocated
	// once. The default is 1000. It is unused for an average window.
	MaxSamples int
}

// Windowed is a Limit decorator that aggregates samples over a time window
// and hands its delegate one sample per window: the average RTT (or a
// percentile), the largest InFlight, and whether any request was dropped.
// Adaptive limits that update per request over-react to single slow
// requests; windowing trades that noise for a slower reaction (one step per
// window). Netflix recommends Windowed(Gradient2) for servers.
//
// Windows are delimited by sample end times (Start+RTT), so Windowed needs no
// clock. A window that closes with fewer than MinSamples samples is dropped,
// not carried over, as in the reference.
//
// The zero value is not usable; create one with NewWindowed. A Windowed is
// not safe for concurrent use: a Limiter serializes its calls (see Limit).
type Windowed struct {
	delegate   Limit
	minWindow  time.Duration
	maxWindow  time.Duration
	minSamples int
	minRTT     time.Duration
	percentile float64

	nextUpdate time.Time
	w          window
}

var _ Limit = (*Windowed)(nil)

// window holds the aggregates of the samples in the current window.
type window struct {
	count       int
	sum         time.Duration
	min         time.Duration
	maxInFlight int
	dropped     bool
	rtts        []time.Duration // percentile windows only; capacity fixed
}

// NewWindowed returns a Limit that feeds delegate one aggregated sample per
// window, configured by opts (nil means defaults).
func NewWindowed(delegate Limit, opts *WindowedOptions) (*Windowed, error) {
	if delegate == nil {
		return nil, invalid("NewWindowed needs a delegate Limit")
	}
	var o WindowedOptions
	if opts != nil {
		o = *opts
	}
	if o.MinWindow < 0 || o.MaxWindow < 0 || o.MinSamples < 0 || o.MinRTT < 0 || o.MaxSamples < 0 {
		return nil, invalid("WindowedOptions has a negative field")
	}
	if o.MinWindow == 0 {
		o.MinWindow = time.Second
	}
	if o.MaxWindow == 0 {
		o.MaxWindow = max(time.Second, o.MinWindow)
	}
	if o.MaxWindow < o.MinWindow {
		return nil, invalid("WindowedOptions.MaxWindow %v < MinWindow %v", o.MaxWindow, o.MinWindow)
	}
	if o.MinSamples == 0 {
		o.MinSamples = 10
	}
	if o.MinRTT == 0 {
		o.MinRTT = 100 * time.Microsecond
	}
	if !validRatio(o.Percentile, 0, 1) || o.Percentile == 1 {
		return nil, invalid("WindowedOptions.Percentile %v not in (0, 1)", o.Percentile)
	}
	if o.MaxSamples == 0 {
		o.MaxSamples = 1000
	}
	w := &Windowed{
		delegate:   delegate,
		minWindow:  o.MinWindow,
		maxWindow:  o.MaxWindow,
		minSamples: o.MinSamples,
		minRTT:     o.MinRTT,
		percentile: o.Percentile,
	}
	if o.Percentile > 0 {
		w.w.rtts = make([]time.Duration, 0, o.MaxSamples)
	}
	w.w.reset()
	return w, nil
}

// Current returns the delegate's current limit.
func (w *Windowed) Current() int { return w.delegate.Current() }

// Update adds s to the current window. When s ends after the window's end,
// it closes the window, passes the aggregate to the delegate if the window
// holds at least MinSamples samples, and returns the delegate's limit.
func (w *Windowed) Update(s Sample) int {
	if s.RTT < w.minRTT {
		return w.delegate.Current()
	}
	w.w.add(s)
	end := s.Start.Add(s.RTT)
	if !end.After(w.nextUpdate) {
		return w.delegate.Current()
	}
	// The next window lasts twice the fastest RTT of this one, so that it
	// spans at least a couple of round trips, within [MinWindow, MaxWindow].
	w.nextUpdate = end.Add(min(max(2*w.w.min, w.minWindow), w.maxWindow))
	if w.w.count < w.minSamples {
		w.w.reset()
		return w.delegate.Current()
	}
	agg := Sample{Start: s.Start, RTT: w.w.tracked(w.percentile), InFlight: w.w.maxInFlight, Dropped: w.w.dropped}
	w.w.reset()
	return w.delegate.Update(agg)
}

func (w *window) reset() {
	w.count, w.sum, w.min, w.maxInFlight, w.dropped = 0, 0, math.MaxInt64, 0, false
	w.rtts = w.rtts[:0]
}

func (w *window) add(s Sample) {
	w.count++
	w.sum += s.RTT
	w.min = min(w.min, s.RTT)
	w.maxInFlight = max(w.maxInFlight, s.InFlight)
	w.dropped = w.dropped || s.Dropped
	if len(w.rtts) < cap(w.rtts) {
		w.rtts = append(w.rtts, s.RTT)
	}
}

// tracked returns the RTT the window reports: the floored mean, or for p in
// (0, 1) the nearest-rank percentile sorted[round(n·p)-1] of the kept RTTs
// (the reference's formula, with the index clamped at 0 for tiny p).
func (w *window) tracked(p float64) time.Duration {
	if p == 0 {
		return w.sum / time.Duration(w.count)
	}
	slices.Sort(w.rtts)
	i := int(math.Round(float64(len(w.rtts))*p)) - 1
	return w.rtts[max(0, i)]
}
