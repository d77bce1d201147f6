package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
)

// ErrInvalidConfig reports a Config that cannot be simulated. Run wraps it
// with the name of the offending field.
var ErrInvalidConfig = errors.New("sim: invalid config")

// Distribution is the distribution of service times.
type Distribution int

const (
	// Deterministic service: every request takes exactly ServiceTime.
	Deterministic Distribution = iota
	// Lognormal service with mean ServiceTime and shape Sigma: the
	// right-skewed latency of real servers, with a tail.
	Lognormal
)

// Config describes one run: a server, the load offered to it over a sequence
// of phases, and the limiter in front of it. The zero value is not usable:
// Workers, ServiceTime and Phases are required.
type Config struct {
	// Seed selects the random streams (arrivals, service times, and the
	// limiter's Rand). Equal configs with equal seeds give identical results.
	Seed uint64
	// Workers is the number of requests the server serves at once (C).
	// Requests beyond it wait in a FIFO queue.
	Workers int
	// ServiceTime is the mean service time of one request (S). The server's
	// nominal capacity is Workers/ServiceTime requests per second.
	ServiceTime time.Duration
	// Service is the distribution of service times. The default is
	// Deterministic.
	Service Distribution
	// Sigma is the shape of the Lognormal distribution (the standard
	// deviation of the logarithm). The default is 0.3.
	Sigma float64
	// Collapse (κ) makes overload expensive: a request that starts service
	// while n > Workers requests are in the server takes
	// 1 + κ·(n-Workers)/Workers times longer (context switches, cache and
	// memory pressure). The default, 0, turns it off.
	Collapse float64
	// Deadline is the client's deadline: a request that completes later than
	// Deadline after it arrived is not goodput, and its token ends with
	// Dropped (the server kept working on it: the waste that collapses an
	// unprotected server). The default is 10·ServiceTime.
	Deadline time.Duration
	// Phases are the consecutive load phases of the run.
	Phases []Phase
	// Classes split arrivals into named partitions by weight. The default is
	// one class with the empty name (Limiter.Acquire).
	Classes []Class
	// Limiter builds the limiter in front of the server from the run's
	// virtual clock and random source, once per process. Nil means no
	// limiter: every request is admitted.
	Limiter func(Env) (*adaptive.Limiter, error)
	// Shedder builds the load shedder of each process, after its limiter
	// (Env.Limiter). A request is asked of it first, with its class's name,
	// and one it sheds never reaches the limiter and costs the server
	// nothing. Nil means no shedder.
	Shedder func(Env) (*shed.Shedder, error)
	// Processes is the number of front processes, each with its own
	// limiter and shedder, in front of the one server: a fleet of API
	// processes sharing a backend. Each arrival goes to one of them
	// uniformly at random, as from a load balancer. The default is 1.
	Processes int
	// Interval is the length of one point of Result.Series. The default is
	// 10·ServiceTime.
	Interval time.Duration
}

// Phase is a stretch of the run with a constant offered load.
type Phase struct {
	// Name labels the phase in results.
	Name string
	// Duration is the length of the phase, in virtual time.
	Duration time.Duration
	// Load is the offered load as a multiple of the nominal capacity
	// Workers/ServiceTime (of the Config, not of this phase): Poisson
	// arrivals at Load·Workers/ServiceTime per second.
	Load float64
	// Workers, when positive, changes the server's worker count at the
	// start of the phase, for the rest of the run (a capacity step).
	// Requests in service finish; new ones start only below the new count.
	Workers int
}

// Class is one class of traffic (or one user: see MaxInFlight).
type Class struct {
	// Name is the partition name passed to Limiter.AcquirePartition and the
	// class passed to Shedder.Allow.
	Name string
	// Weight is the class's relative share of arrivals.
	Weight float64
	// ServiceTime, when positive, is the mean service time of the class's
	// requests instead of Config.ServiceTime (the load of Phase.Load is
	// still counted in requests of Config.ServiceTime).
	ServiceTime time.Duration
	// Deadline, when positive, is the client deadline of the class's
	// requests instead of Config.Deadline.
	Deadline time.Duration
	// MaxInFlight, when positive, caps the class's requests in the server
	// at once, across processes: a request beyond the cap is refused
	// (Capped) before the shedder and the limiter, as a per-user
	// concurrent-request limiter shared by the fleet refuses it. The
	// simulator models the cap itself: it needs no store. The default, 0,
	// is no cap.
	MaxInFlight int
}

// Env is what a Config's Limiter and Shedder functions get to build with.
type Env struct {
	// Now is the run's virtual clock; pass it as LimiterOptions.Now.
	Now func() time.Time
	// Rand is the run's seeded random source for the limiter, uniform in
	// [0, 1); pass it as VegasOptions.Rand.
	Rand func() float64
	// Process is the index of the process being built, from 0.
	Process int
	// Limiter is the process's limiter, for Config.Shedder (nil when
	// building the limiter itself, or without one).
	Limiter *adaptive.Limiter
	// InFlight returns the number of the process's requests in the server
	// (queued or in service): its load on the server, for a shed.Fleet.
	InFlight func() int
	// Every calls f every d of virtual time, from d on, until the run
	// ends: for periodic work such as shed.Fleet's Sync. It panics on a d
	// that is not positive.
	Every func(d time.Duration, f func())
}

// Capacity returns the nominal capacity, Workers/ServiceTime, in requests per
// second.
func (c *Config) Capacity() float64 {
	return float64(c.Workers) / c.ServiceTime.Seconds()
}

// normalize validates c and fills in defaults.
func (c Config) normalize() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Workers < 1:
		return bad("Workers %d < 1", c.Workers)
	case c.ServiceTime <= 0:
		return bad("ServiceTime %v <= 0", c.ServiceTime)
	case c.Service != Deterministic && c.Service != Lognormal:
		return bad("Service %d unknown", c.Service)
	case !(c.Sigma >= 0) || math.IsInf(c.Sigma, 0):
		return bad("Sigma %v not a finite number >= 0", c.Sigma)
	case !(c.Collapse >= 0) || math.IsInf(c.Collapse, 0):
		return bad("Collapse %v not a finite number >= 0", c.Collapse)
	case c.Deadline < 0 || c.Interval < 0:
		return bad("negative Deadline or Interval")
	case len(c.Phases) == 0:
		return bad("no Phases")
	case c.Processes < 0:
		return bad("Processes %d < 0", c.Processes)
	}
	for i, p := range c.Phases {
		if p.Duration <= 0 || !(p.Load >= 0) || math.IsInf(p.Load, 0) || p.Workers < 0 {
			return bad("Phases[%d] needs Duration > 0, a finite Load >= 0 and Workers >= 0", i)
		}
	}
	for i, cl := range c.Classes {
		if !(cl.Weight > 0) || math.IsInf(cl.Weight, 0) {
			return bad("Classes[%d].Weight %v not a finite number > 0", i, cl.Weight)
		}
		if cl.ServiceTime < 0 || cl.Deadline < 0 || cl.MaxInFlight < 0 {
			return bad("Classes[%d] has a negative ServiceTime, Deadline or MaxInFlight", i)
		}
	}
	if c.Processes == 0 {
		c.Processes = 1
	}
	if c.Sigma == 0 {
		c.Sigma = 0.3
	}
	if c.Deadline == 0 {
		c.Deadline = 10 * c.ServiceTime
	}
	if c.Interval == 0 {
		c.Interval = 10 * c.ServiceTime
	}
	if len(c.Classes) == 0 {
		c.Classes = []Class{{Weight: 1}}
	}
	c.Classes = append([]Class(nil), c.Classes...)
	c.Phases = append([]Phase(nil), c.Phases...)
	return c, nil
}
