package shed

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/observe"
)

// Never is the threshold of a class that is never shed, whatever the gauge
// reads (+Inf included).
const Never = math.MaxFloat64

// Thresholds gives, per criticality class, the utilization at or above which
// the class's requests are shed. The classes are adaptive's four (after
// Google SRE's CRITICAL_PLUS > CRITICAL > SHEDDABLE_PLUS > SHEDDABLE), and a
// request of any other class counts as adaptive.ClassDefault.
//
// A zero field means its default, which is the graduated rule: at 80% of
// capacity the low-priority classes (Sheddable and Background) are shed, at
// 95% everything but Critical, and Critical never. A field must be positive
// (or Never), and the thresholds may not rise as importance falls:
// Background <= Sheddable <= Default <= Critical, so that a more important
// class is never shed while a less important one is served.
//
// Stripe's fleet usage load shedder, which keeps 20% of capacity for
// critical requests, is the default for Sheddable traffic (0.8) and
// Critical never shed; give non-critical traffic ClassSheddable, or set
// Default to 0.8.
type Thresholds struct {
	// Critical is the threshold of adaptive.ClassCritical. The default is
	// Never.
	Critical float64
	// Default is the threshold of adaptive.ClassDefault and of unknown
	// classes. The default is 0.95.
	Default float64
	// Sheddable is the threshold of adaptive.ClassSheddable. The default is
	// 0.8.
	Sheddable float64
	// Background is the threshold of adaptive.ClassBackground. The default
	// is 0.8.
	Background float64
}

// The classes' indices in a Shedder's tables.
const (
	critical = iota
	standard // adaptive.ClassDefault and unknown classes
	sheddable
	background
	classes
)

// classNames are the names Decision.Class reports, by index.
var classNames = [classes]string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable, adaptive.ClassBackground}

// classIndex returns the index of class; unknown classes count as the
// default. Four string comparisons: cheaper than a map lookup.
func classIndex(class string) int {
	switch class {
	case adaptive.ClassCritical:
		return critical
	case adaptive.ClassSheddable:
		return sheddable
	case adaptive.ClassBackground:
		return background
	default:
		return standard
	}
}

// Options configures New. A nil *Options, or a zero field, means the
// default.
type Options struct {
	// Thresholds are the utilizations at which each class is shed. The
	// default is the graduated rule (see Thresholds).
	Thresholds Thresholds
	// Name names the Shedder in the events it reports (observe.Shed.Name).
	// The default is "shed".
	Name string
	// Observer receives every request the Shedder sheds (OnShed: its
	// class as Decision.Class reports it, the utilization it was shed at
	// and its class's threshold), on the goroutine of Allow, with no lock
	// held, with context.Background() since Allow takes no context. The
	// default (nil) reports nothing; the Observer's other fields do not
	// apply. Allowed requests are counted by Stats.
	Observer *observe.Observer
}

// DefaultName is the default of Options.Name.
const DefaultName = "shed"

// Decision is a Shedder's answer for one request.
type Decision struct {
	// Allowed reports that the request may proceed: the utilization was
	// below its class's threshold.
	Allowed bool
	// Class is the class the request was counted as: one of adaptive's
	// four class names (an unknown class is adaptive.ClassDefault).
	Class string
	// Utilization is the gauge's reading the decision was made on (0 for a
	// NaN reading).
	Utilization float64
	// Threshold is the class's threshold (Never for a class never shed).
	Threshold float64
}

// Stats counts a Shedder's decisions per class.
type Stats struct {
	Critical, Default, Sheddable, Background ClassStats
}

// ClassStats counts the decisions of one class.
type ClassStats struct {
	Allowed, Shed uint64
}

// Shedder sheds requests by utilization and priority: a request is shed when
// its Gauge reads at or above its class's threshold. It holds no lock: the
// thresholds are immutable and the counters atomic, so the Gauge (user code)
// is never called under a lock, and a decision does not allocate.
//
// The zero value is not usable; create one with New. A Shedder is safe for
// concurrent use.
type Shedder struct {
	gauge     Gauge
	threshold [classes]float64
	counts    [classes]counter
	name      string
	onShed    func(context.Context, observe.Shed) // nil: none
}

// counter is one class's counts, padded to a cache line of its own so that
// decisions of different classes on different cores do not contend.
type counter struct {
	allowed, shed atomic.Uint64
	_             [48]byte
}

// New returns a Shedder that reads g, configured by opts (nil means
// defaults).
func New(g Gauge, opts *Options) (*Shedder, error) {
	if g == nil {
		return nil, invalid("New needs a Gauge")
	}
	var t Thresholds
	if opts != nil {
		t = opts.Thresholds
	}
	fill := func(v *float64, def float64) { // zero means the default
		if *v == 0 {
			*v = def
		}
	}
	fill(&t.Critical, Never)
	fill(&t.Default, 0.95)
	fill(&t.Sheddable, 0.8)
	fill(&t.Background, 0.8)
	for _, v := range []float64{t.Critical, t.Default, t.Sheddable, t.Background} {
		if !(v > 0) {
			return nil, invalid("Thresholds %+v: each must be > 0 or Never", t)
		}
	}
	if !(t.Background <= t.Sheddable && t.Sheddable <= t.Default && t.Default <= t.Critical) {
		return nil, invalid("Thresholds %+v: need Background <= Sheddable <= Default <= Critical", t)
	}
	s := &Shedder{gauge: g}
	if err := s.observe(opts); err != nil {
		return nil, err
	}
	s.threshold = [classes]float64{critical: t.Critical, standard: t.Default, sheddable: t.Sheddable, background: t.Background}
	return s, nil
}

// Allow decides whether a request of the given class may proceed now. The
// class is one of adaptive's class names; any other counts as
// adaptive.ClassDefault.
func (s *Shedder) Allow(class string) Decision {
	c := classIndex(class)
	u := s.gauge.Utilization()
	if math.IsNaN(u) {
		u = 0
	}
	t := s.threshold[c]
	d := Decision{Allowed: u < t || t == Never, Class: classNames[c], Utilization: u, Threshold: t}
	if d.Allowed {
		s.counts[c].allowed.Add(1)
	} else {
		s.counts[c].shed.Add(1)
		if s.onShed != nil {
			s.onShed(context.Background(), observe.Shed{Name: s.name, Class: d.Class, Utilization: u, Threshold: t})
		}
	}
	return d
}

// Stats returns the counts of the decisions so far.
func (s *Shedder) Stats() Stats {
	get := func(c int) ClassStats {
		return ClassStats{Allowed: s.counts[c].allowed.Load(), Shed: s.counts[c].shed.Load()}
	}
	return Stats{Critical: get(critical), Default: get(standard), Sheddable: get(sheddable), Background: get(background)}
}

// observe sets the name and the observer of opts (nil means the defaults),
// after validating the observer.
func (s *Shedder) observe(opts *Options) error {
	s.name = DefaultName
	if opts == nil {
		return nil
	}
	if err := opts.Observer.Validate(); err != nil {
		return invalid("Options.Observer: %w", err)
	}
	if opts.Name != "" {
		if err := floodgate.CheckName(opts.Name); err != nil {
			return invalid("Options.Name: %w", err)
		}
		s.name = opts.Name
	}
	if opts.Observer != nil {
		s.onShed = opts.Observer.OnShed
	}
	return nil
}
