// Package regionsim is a deterministic simulator of package region: a
// quota split across regions, each deciding on its own in-process store
// (memstore) under a virtual clock, reconciling through a
// region.MemCoordinator, with seeded traffic, clock skews, lost calls, cut
// links and reconcilers killed between the steps of the protocol. The
// same Config and seed give the same Result. Its tests assert the
// package's criteria over many seeds; bench/regions plots its traces.
package regionsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/region"
)

// Config describes one simulation. The zero values of the optional fields
// are their defaults.
type Config struct {
	// Seed seeds every random choice.
	Seed uint64
	// Regions are the regions, as for region.New.
	Regions []region.Region
	// Limit is the global quota per Window.
	Limit  int64
	Window time.Duration
	// Interval and Margin are the regions' Options; the defaults are
	// region's.
	Interval, Margin time.Duration
	// Duration is the virtual time simulated, from the start of a window.
	Duration time.Duration
	// Tick is the step of the traffic: the default is 10ms.
	Tick time.Duration
	// Demand is the units per second region r asks for at time t since
	// the start. Requests of one unit arrive evenly at the rate Demand
	// times a factor drawn per interval within ±Noise, or, with Poisson,
	// as a Poisson process of that rate.
	Demand func(r int, t time.Duration) float64
	// Poisson makes arrivals a Poisson process rather than even.
	Poisson bool
	// Noise is the relative noise of demand per interval, in [0, 1).
	Noise float64
	// MaxSkew bounds each region's clock skew (drawn per region, seeded):
	// its Store's and its local store's clocks differ from the virtual
	// time by at most MaxSkew, and from each other by at most MaxSkew.
	MaxSkew time.Duration
	// Loss is the probability that a call to the coordinator fails: half
	// of those before the coordinator applies it, half after (a lost
	// reply).
	Loss float64
	// Cut reports whether region r's link to the coordinator is down at t.
	Cut func(r int, t time.Duration) bool
	// Kill reports whether region r's reconciler crashes at step st of its
	// interval at t; it is then restarted at once (a new Store over the
	// same local store, knowing nothing).
	Kill func(r int, t time.Duration, st region.Step) bool
	// Sample, when set, is called at every Interval boundary with the
	// state so far (for plots).
	Sample func(Sample)
	// Calendar, when set, is the quota instead of a FixedWindow of Limit
	// per Window: Limit must be its Limit, and Window its Policy's Window
	// (the longest of its windows). The simulation starts at the start of
	// the calendar window holding Start (a zero Start: 2026-03-06 12:00
	// UTC, two days before New York's clocks go forward).
	Calendar *floodgate.CalendarWindow
	Start    time.Time
	// Processes is the number of processes per region (the default is
	// 1): with more than one, a region's processes each run a Store on the
	// region's local store, share its traffic round robin and elect one
	// reconciler through a region.MemPeers (region.Options.Peers), each
	// with its own phase and clock skew. Kill then applies to whichever
	// process is at that step.
	Processes int
}

// Sample is the state at one instant.
type Sample struct {
	// T is the time since the start.
	T time.Duration
	// Held is each region's granted − debited units of the current window
	// at the coordinator, Next its grant of the next window, and Used its
	// admissions in the current window so far.
	Held, Next, Used []int64
	// Rate is each region's true demand (Demand, without noise), in units
	// per second.
	Rate []float64
	// Window is the current window's index, Elapsed the time into it and
	// Left the time left in it.
	Window        int64
	Elapsed, Left time.Duration
}

// Result is what a simulation measured.
type Result struct {
	// Start is the first window's index.
	Start int64
	// Admitted and Asked hold, per window from Start and per region, the
	// units admitted (counted in the window of the local store's clock)
	// and asked.
	Admitted, Asked [][]int64
	// MaxHeld is the largest Σ(granted − debited) the coordinator held in
	// any window it was sampled in.
	MaxHeld int64
	// Stats are each region's Store's counts, summed over restarts and
	// over the region's processes (MaxCallsPerInterval is the largest of
	// one Store's).
	Stats []region.Stats
	// Samples are the samples at every Interval boundary.
	Samples []Sample
	// Calls counts, per region, the calls its processes made to the
	// coordinator (failed ones included), counted outside the Stores.
	Calls []int64
}

// Name and Key are the limiter name and key of the simulated quota.
const (
	Name = "sim"
	Key  = "k"
)

var errCut = errors.New("regionsim: link cut")
var errKilled = errors.New("regionsim: killed")

type regionState struct {
	local *memstore.Store
	peers *region.MemPeers // with Processes > 1
	lskew time.Duration    // the local store's clock
	procs []*process
	turn  int     // the process the next arrival goes to
	rate  float64 // this interval's noisy rate
	carry float64 // arrivals due, for even arrivals
}

// process is one process of a region: a Store and its schedule.
type process struct {
	store  *region.Store
	bound  floodgate.Bound
	skew   time.Duration // the Store's clock
	next   time.Duration // next reconcile
	stats  region.Stats  // of Stores replaced
	killed bool
}

// faulty is the coordinator as region r sees it.
type faulty struct {
	sim *sim
	r   int
}

func (f *faulty) Exchange(ctx context.Context, m *region.Message) (*region.Reply, error) {
	s := f.sim
	s.calls[f.r]++
	if s.cfg.Cut != nil && s.cfg.Cut(f.r, s.t) {
		return nil, errCut
	}
	if s.cfg.Loss > 0 {
		u := s.rng.Float64()
		if u < s.cfg.Loss/2 {
			return nil, errCut
		}
		if u < s.cfg.Loss {
			_, _ = s.coord.Exchange(ctx, m)
			return nil, errCut
		}
	}
	return s.coord.Exchange(ctx, m)
}

type sim struct {
	cfg   Config
	rng   *rand.Rand
	t     time.Duration
	t0    time.Time
	coord *region.MemCoordinator
	rs    []*regionState
	alg   floodgate.Algorithm
	calls []int64
}

// Run runs the simulation. It returns an error for an unusable Config.
func Run(cfg Config) (*Result, error) {
	if cfg.Limit < 1 || cfg.Window <= 0 || cfg.Duration <= 0 || cfg.Demand == nil {
		return nil, fmt.Errorf("regionsim: Limit, Window, Duration and Demand are required")
	}
	if cfg.Tick == 0 {
		cfg.Tick = 10 * time.Millisecond
	}
	if cfg.Interval == 0 {
		cfg.Interval = region.DefaultInterval
	}
	if cfg.Margin == 0 {
		cfg.Margin = region.DefaultMargin
	}
	coord, err := region.NewMemCoordinator(cfg.Regions)
	if err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), coord: coord,
		alg: floodgate.FixedWindow{Limit: cfg.Limit, Window: cfg.Window}}
	if cfg.Calendar != nil {
		s.alg = *cfg.Calendar
	}
	// A start on a window boundary, far from the epoch.
	start := int64(1_000_000_000_000) / int64(cfg.Window)
	s.t0 = time.Unix(0, start*int64(cfg.Window))
	if cfg.Calendar != nil {
		if cfg.Start.IsZero() {
			cfg.Start = time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC)
		}
		start, s.t0, _ = region.WindowOf(s.alg, cfg.Start)
		s.cfg = cfg
	}
	res := &Result{Start: start, Stats: make([]region.Stats, len(cfg.Regions))}
	s.calls = make([]int64, len(cfg.Regions))
	res.Calls = s.calls
	nw := int(cfg.Duration/cfg.Window) + 2
	res.Admitted, res.Asked = make([][]int64, nw), make([][]int64, nw)
	for i := range nw {
		res.Admitted[i], res.Asked[i] = make([]int64, len(cfg.Regions)), make([]int64, len(cfg.Regions))
	}
	for r := range cfg.Regions {
		// The draws of the first process come in the order of the
		// simulator with one process per region, so seeds give the same
		// runs as before Processes existed.
		rs := &regionState{}
		p := &process{next: time.Duration(s.rng.Int64N(int64(cfg.Interval)))}
		if cfg.MaxSkew > 0 {
			p.skew = time.Duration(s.rng.Int64N(int64(cfg.MaxSkew))) - cfg.MaxSkew/2
			rs.lskew = time.Duration(s.rng.Int64N(int64(cfg.MaxSkew))) - cfg.MaxSkew/2
		}
		rs.procs = append(rs.procs, p)
		for range cfg.Processes - 1 {
			p := &process{next: time.Duration(s.rng.Int64N(int64(cfg.Interval)))}
			if cfg.MaxSkew > 0 {
				p.skew = time.Duration(s.rng.Int64N(int64(cfg.MaxSkew))) - cfg.MaxSkew/2
			}
			rs.procs = append(rs.procs, p)
		}
		if len(rs.procs) > 1 {
			rs.peers = region.NewMemPeers(func() time.Time { return s.t0.Add(s.t) })
		}
		rs.local, err = memstore.New(&memstore.Options{Now: func() time.Time { return s.t0.Add(s.t + rs.lskew) }})
		if err != nil {
			return nil, err
		}
		for _, p := range rs.procs {
			if err := s.build(r, rs, p); err != nil {
				return nil, err
			}
		}
		s.rs = append(s.rs, rs)
	}
	ctx := context.Background()
	for s.t = 0; s.t < cfg.Duration; s.t += cfg.Tick {
		if s.t%cfg.Interval == 0 {
			for r, rs := range s.rs {
				rs.rate = cfg.Demand(r, s.t) * (1 + cfg.Noise*(2*s.rng.Float64()-1))
			}
			smp := s.sample(res)
			res.Samples = append(res.Samples, smp)
			if cfg.Sample != nil {
				cfg.Sample(smp)
			}
		}
		for r, rs := range s.rs {
			for _, p := range rs.procs {
				for s.t >= p.next {
					err := p.store.Reconcile(ctx)
					if p.killed || errors.Is(err, errKilled) {
						p.killed = false
						if err := s.restart(r, rs, p); err != nil {
							return nil, err
						}
					}
					if rs.peers != nil {
						// The background reconciler's schedule (the
						// Store's clock is the virtual time plus its skew).
						end := s.t0.Add(s.t + p.skew)
						p.next = s.t + p.store.NextReconcile(end).Sub(end)
						continue
					}
					jitter := time.Duration(s.rng.Int64N(int64(cfg.Interval)/10+1)) - cfg.Interval/20
					p.next += cfg.Interval + jitter
				}
			}
			n := 0
			if cfg.Poisson {
				n = s.poisson(rs.rate * cfg.Tick.Seconds())
			} else {
				rs.carry += rs.rate * cfg.Tick.Seconds()
				n = int(rs.carry)
				rs.carry -= float64(n)
			}
			for range n {
				wi := int(s.index(s.t0.Add(s.t+rs.lskew)) - start)
				if wi >= 0 && wi < nw {
					res.Asked[wi][r]++
				}
				p := rs.procs[rs.turn]
				rs.turn = (rs.turn + 1) % len(rs.procs)
				got, err := p.bound.Apply(ctx, Key, floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
				if err != nil {
					return nil, err
				}
				if got.Allowed {
					wi := int(s.index(got.At) - start)
					if wi >= 0 && wi < nw {
						res.Admitted[wi][r]++
					}
				}
			}
		}
	}
	for r, rs := range s.rs {
		for _, p := range rs.procs {
			res.Stats[r] = add(res.Stats[r], add(p.stats, p.store.Stats()))
			_ = p.store.Close()
		}
	}
	for i := range res.Admitted {
		h := coord.Held(s.quotaID(), cfg.Limit, cfg.Window, start+int64(i))
		res.MaxHeld = max(res.MaxHeld, h)
	}
	return res, nil
}

// poisson draws a Poisson variate of mean m (Knuth's method: m is small,
// a tick's arrivals).
func (s *sim) poisson(m float64) int {
	if m <= 0 {
		return 0
	}
	l, k, p := math.Exp(-m), 0, s.rng.Float64()
	for p > l {
		k++
		p *= s.rng.Float64()
	}
	return k
}

func (s *sim) build(r int, rs *regionState, p *process) error {
	opts := &region.Options{Interval: s.cfg.Interval, Margin: s.cfg.Margin, Manual: true,
		Now: func() time.Time { return s.t0.Add(s.t + p.skew) },
		Hook: func(st region.Step) error {
			if s.cfg.Kill != nil && s.cfg.Kill(r, s.t, st) {
				p.killed = true
				return errKilled
			}
			return nil
		}}
	if rs.peers != nil {
		opts.Peers = rs.peers
	}
	st, err := region.New(rs.local, &faulty{sim: s, r: r}, s.cfg.Regions, s.cfg.Regions[r].Name, opts)
	if err != nil {
		return err
	}
	b, err := st.Bind(Name, s.alg)
	if err != nil {
		return err
	}
	p.store, p.bound = st, b
	return nil
}

func (s *sim) restart(r int, rs *regionState, p *process) error {
	p.stats = add(p.stats, p.store.Stats())
	_ = p.store.Close()
	return s.build(r, rs, p)
}

func add(a, b region.Stats) region.Stats {
	return region.Stats{Intervals: a.Intervals + b.Intervals, Calls: a.Calls + b.Calls, FailedCalls: a.FailedCalls + b.FailedCalls,
		MaxCallsPerInterval: max(a.MaxCallsPerInterval, b.MaxCallsPerInterval), Debits: a.Debits + b.Debits,
		DebitedUnits: a.DebitedUnits + b.DebitedUnits, StrandedUnits: a.StrandedUnits + b.StrandedUnits, LateSteps: a.LateSteps + b.LateSteps,
		Syncs: a.Syncs + b.Syncs, FailedSyncs: a.FailedSyncs + b.FailedSyncs, Led: a.Led + b.Led}
}

// sample reads the coordinator's ledger at the virtual time, with a
// message that changes nothing.
func (s *sim) sample(res *Result) Sample {
	now := s.t0.Add(s.t)
	n := len(s.cfg.Regions)
	w, ws, we := region.WindowOf(s.alg, now)
	smp := Sample{T: s.t, Window: w, Elapsed: now.Sub(ws), Left: we.Sub(now),
		Held: make([]int64, n), Next: make([]int64, n), Used: make([]int64, n), Rate: make([]float64, n)}
	rep, err := s.coord.Exchange(context.Background(), &region.Message{Region: s.cfg.Regions[0].Name, At: now,
		Quotas: []region.QuotaMessage{{ID: s.quotaID(), Limit: s.cfg.Limit, Window: s.cfg.Window, Indexed: s.cfg.Calendar != nil, Index: w}}})
	if err == nil {
		q := rep.Quotas[0]
		var held int64
		for r := range n {
			smp.Held[r] = q.Windows[0].Granted[r] - q.Windows[0].Debited[r]
			smp.Next[r] = q.Windows[1].Granted[r]
			held += smp.Held[r]
		}
		res.MaxHeld = max(res.MaxHeld, held)
	}
	for r := range n {
		smp.Rate[r] = s.cfg.Demand(r, s.t)
		if wi := int(w - res.Start); wi >= 0 && wi < len(res.Admitted) {
			smp.Used[r] = res.Admitted[wi][r]
		}
	}
	return smp
}

// quotaID is the coordinator's ID of the simulated quota (see
// region.QuotaID; a calendar's carries its region.CalendarTag).
func (s *sim) quotaID() string {
	if s.cfg.Calendar != nil {
		return region.QuotaID(Name, Key) + "|" + region.CalendarTag(*s.cfg.Calendar)
	}
	return region.QuotaID(Name, Key)
}

// index returns the index of the quota's window holding t.
func (s *sim) index(t time.Time) int64 {
	if s.cfg.Calendar == nil {
		return windowIndex(t, s.cfg.Window)
	}
	i, _, _ := region.WindowOf(s.alg, t)
	return i
}

func windowIndex(t time.Time, w time.Duration) int64 {
	ns := t.UnixNano()
	i := ns / int64(w)
	if ns%int64(w) < 0 {
		i--
	}
	return i
}
