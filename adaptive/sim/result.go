package sim

import (
	"encoding/csv"
	"io"
	"slices"
	"strconv"
	"time"
)

// Point is one interval of a run's time series.
type Point struct {
	// Time is the end of the interval, in virtual time since the start.
	Time time.Duration
	// Phase is the name of the phase the interval belongs to.
	Phase string
	// Offered, Goodput and Rejected are rates over the interval, in
	// requests per second: arrivals, completions within the deadline, and
	// rejections.
	Offered, Goodput, Rejected float64
	// Limit is the limiter's limit at the end of the interval (0 without a
	// limiter).
	Limit int
	// InFlight is the number of admitted requests in the server (queued or
	// in service) at the end of the interval.
	InFlight int
	// P50 and P99 are latency percentiles of the requests that completed in
	// the interval (0 if none did).
	P50, P99 time.Duration

	offered, good, rejected int
}

// Span is the extent of one phase in virtual time.
type Span struct {
	Name       string
	Start, End time.Duration
}

// Result is the outcome of Run.
type Result struct {
	// Config is the run's configuration, with defaults filled in.
	Config Config
	// Phases are the phases' extents.
	Phases []Span
	// Series has one Point per Config.Interval.
	Series []Point

	reqs []request
	end  time.Duration // the end of the run
}

// Stats summarizes the requests that arrived in a stretch of a run.
type Stats struct {
	// From and To delimit the stretch: requests arriving in [From, To).
	From, To time.Duration
	// Offered counts arrivals; Rejected those the limiter rejected; Shed
	// those the shedder shed; Capped those refused by their class's
	// MaxInFlight; Good those that completed within the deadline; Late
	// those that completed after it; Unfinished those still in the server
	// at the end of the run.
	Offered, Rejected, Shed, Capped, Good, Late, Unfinished int
	// ShedUtilization is the lowest utilization of the server (requests in
	// it, queued or in service, over workers) at which a request of the
	// stretch was shed, and ShedGauge the lowest shedder reading
	// (shed.Decision.Utilization) at which one was; both 0 if none was.
	ShedUtilization, ShedGauge float64
	// Occupancy is the mean number of requests in the server over the
	// stretch, whenever they arrived.
	Occupancy float64
	// Goodput is Good per second of the stretch.
	Goodput float64
	// P50 and P99 are latency percentiles of the admitted requests that
	// completed (Good and Late).
	P50, P99 time.Duration
	// LimitMedian, LimitMin and LimitMax summarize the limit over the series
	// points that end inside (From, To].
	LimitMedian, LimitMin, LimitMax int
	// Classes holds the same counts per class, keyed by class name.
	Classes map[string]ClassStats
}

// ClassStats is the part of Stats that belongs to one class.
type ClassStats struct {
	Offered, Rejected, Shed, Capped, Good, Late, Unfinished int
	// Occupancy is the mean number of the class's requests in the server
	// over the stretch.
	Occupancy float64
	// MaxInFlight is the most of the class's requests in the server at
	// once during the stretch.
	MaxInFlight int
}

// Stats summarizes the requests that arrived in [from, to).
func (r *Result) Stats(from, to time.Duration) Stats {
	s := Stats{From: from, To: to, Classes: map[string]ClassStats{}}
	var lat []time.Duration
	lo, _ := slices.BinarySearchFunc(r.reqs, from, func(q request, t time.Duration) int { return cmpDuration(q.arrival, t) })
	for _, q := range r.reqs[lo:] {
		if q.arrival >= to {
			break
		}
		name := r.Config.Classes[q.class].Name
		c := s.Classes[name]
		s.Offered++
		c.Offered++
		switch q.outcome {
		case Rejected:
			s.Rejected++
			c.Rejected++
		case Shed:
			s.Shed++
			c.Shed++
			u, g := q.util, q.gauge
			if s.Shed == 1 || u < s.ShedUtilization {
				s.ShedUtilization = u
			}
			if s.Shed == 1 || g < s.ShedGauge {
				s.ShedGauge = g
			}
		case Capped:
			s.Capped++
			c.Capped++
		case Good:
			s.Good++
			c.Good++
		case Late:
			s.Late++
			c.Late++
		case Unfinished:
			s.Unfinished++
			c.Unfinished++
		}
		if q.outcome == Good || q.outcome == Late {
			lat = append(lat, q.done-q.arrival)
		}
		s.Classes[name] = c
	}
	r.occupancy(&s)
	if secs := (to - from).Seconds(); secs > 0 {
		s.Goodput = float64(s.Good) / secs
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.P50, s.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	}
	var limits []int
	for _, p := range r.Series {
		if p.Time > from && p.Time <= to {
			limits = append(limits, p.Limit)
		}
	}
	if len(limits) > 0 {
		slices.Sort(limits)
		s.LimitMin, s.LimitMax = limits[0], limits[len(limits)-1]
		s.LimitMedian = limits[len(limits)/2]
	}
	return s
}

// Phase returns the Stats of the named phase, skipping its first settle of
// virtual time (the convergence budget). It returns false if no phase has
// that name.
func (r *Result) Phase(name string, settle time.Duration) (Stats, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return r.Stats(min(p.End, p.Start+settle), p.End), true
		}
	}
	return Stats{}, false
}

// occupancy fills in s's Occupancy and its classes' Occupancy and
// MaxInFlight from every request in the server during [s.From, s.To).
func (r *Result) occupancy(s *Stats) {
	if s.To <= s.From {
		return
	}
	type edge struct {
		at    time.Duration
		class int32
		delta int
	}
	var edges []edge
	area := make([]float64, len(r.Config.Classes))
	for _, q := range r.reqs {
		if q.arrival >= s.To {
			break
		}
		if q.outcome != Good && q.outcome != Late && q.outcome != Unfinished {
			continue
		}
		lo, hi := max(q.arrival, s.From), min(q.done, s.To)
		if hi > lo {
			area[q.class] += float64(hi - lo)
		}
		if q.done > s.From {
			edges = append(edges, edge{q.arrival, q.class, 1}, edge{q.done, q.class, -1})
		}
	}
	// The most in flight at once: sweep the arrivals and departures, a
	// departure first at equal instants (the simulator frees before it
	// admits).
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmpDuration(a.at, b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	busy := make([]int, len(r.Config.Classes))
	peak := make([]int, len(r.Config.Classes))
	started := false
	for _, e := range edges {
		if e.at >= s.To {
			break
		}
		if !started && e.at >= s.From {
			// What was in the server at From.
			started = true
			for i := range busy {
				peak[i] = max(peak[i], busy[i])
			}
		}
		busy[e.class] += e.delta
		if started {
			peak[e.class] = max(peak[e.class], busy[e.class])
		}
	}
	span := float64(s.To - s.From)
	for i, cl := range r.Config.Classes {
		c := s.Classes[cl.Name]
		c.Occupancy += area[i] / span
		c.MaxInFlight = max(c.MaxInFlight, peak[i])
		s.Classes[cl.Name] = c
		s.Occupancy += area[i] / span
	}
}

func cmpDuration(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CSVHeader is the header row WriteCSV writes, for tools that render the
// series (bench/ turns it into the README's chart).
var CSVHeader = []string{"label", "phase", "t_s", "offered_rps", "goodput_rps", "rejected_rps", "limit", "inflight", "p50_ms", "p99_ms"}

// WriteCSV writes the series as CSV rows in the CSVHeader layout, each
// labelled with label (for example the limiter's name, so that several runs
// can share one file). With header set it writes CSVHeader first.
func (r *Result) WriteCSV(w io.Writer, label string, header bool) error {
	cw := csv.NewWriter(w)
	if header {
		if err := cw.Write(CSVHeader); err != nil {
			return err
		}
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	for _, p := range r.Series {
		row := []string{label, p.Phase, f(p.Time.Seconds()), f(p.Offered), f(p.Goodput), f(p.Rejected),
			strconv.Itoa(p.Limit), strconv.Itoa(p.InFlight), ms(p.P50), ms(p.P99)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
