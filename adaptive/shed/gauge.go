package shed

// Gauge reports the utilization a Shedder decides on: the work in progress
// over the capacity for it, 0 when idle and 1 at capacity (it may exceed 1).
//
// Contract for implementers: Utilization is called once per decision, on the
// request's goroutine, concurrently from many goroutines, and with no lock of
// this package held. It must be safe for concurrent use, must not block
// (read a value another goroutine keeps up to date rather than measure),
// and should not allocate: it sits on every request's path. A NaN counts
// as 0, so a broken gauge sheds nothing.
//
// *adaptive.Limiter is a Gauge (requests in flight over its limit), and so is
// *Fleet (a fleet's utilization). GaugeFunc adapts a function, for CPU
// utilization or a queue's depth over its capacity.
type Gauge interface {
	// Utilization returns the current utilization.
	Utilization() float64
}

// GaugeFunc adapts a function to a Gauge.
type GaugeFunc func() float64

// Utilization returns f().
func (f GaugeFunc) Utilization() float64 { return f() }
