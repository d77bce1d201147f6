package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
)

// epoch is the wall-clock instant virtual time 0 maps to. Any fixed instant
// does: only differences matter.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Outcome is how a simulated request ended.
type Outcome uint8

const (
	// Unfinished: admitted, still in the server when the run ended.
	Unfinished Outcome = iota
	// Rejected by the limiter; it cost the server nothing.
	Rejected
	// Good: completed within the deadline.
	Good
	// Late: completed after the deadline (the client had given up).
	Late
	// Shed by the shedder (Config.Shedder), before the limiter; it cost the
	// server nothing.
	Shed
	// Capped: its class already had Class.MaxInFlight requests in the
	// server; it cost the server nothing.
	Capped
)

// request is one simulated request.
type request struct {
	arrival time.Duration
	done    time.Duration // completion time, for Good and Late; the run's end for Unfinished
	class   int32
	process int32
	outcome Outcome
	// For Shed: the server's utilization (requests in it over workers) and
	// the shedder's reading when it was shed.
	util, gauge float64
	tok         adaptive.Token
}

// eventKind orders simultaneous events: phase changes first, then
// completions (freeing capacity), then Env.Every callbacks, then arrivals,
// then the series tick that observes the result.
type eventKind uint8

const (
	evPhase eventKind = iota
	evCompletion
	evCallback
	evArrival
	evTick
)

type event struct {
	at   time.Duration
	kind eventKind
	seq  uint64 // FIFO among equal (at, kind): keeps runs deterministic
	arg  int    // request index (completion), phase index, arrival generation, or callback index
}

func (a event) before(b event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}

// eventHeap is a binary min-heap of events (a typed one: container/heap
// would box every event in an interface).
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].before(h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	last := len(h.ev) - 1
	h.ev[0] = h.ev[last]
	h.ev = h.ev[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.ev[l].before(h.ev[m]) {
			m = l
		}
		if r < last && h.ev[r].before(h.ev[m]) {
			m = r
		}
		if m == i {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}

// engine is the state of one run. Everything happens on one goroutine, in
// virtual time: no sleeps, no timers.
type engine struct {
	cfg       Config
	now       time.Duration
	events    eventHeap
	procs     []process
	callbacks []callback
	classBusy []int // requests of each class in the server

	arrivals, service *rand.Rand
	cumWeight         []float64 // cumulative class probabilities

	phase      int
	rate       float64 // arrivals per second in the current phase
	generation int     // invalidates arrival events of earlier phases

	workers int   // current worker count
	busy    int   // requests in service
	queue   []int // waiting requests (FIFO), as indices into reqs
	head    int   // first live element of queue
	reqs    []request

	// Current series bucket.
	bucket    Point
	latencies []time.Duration
	series    []Point
}

// process is one front process: its limiter and shedder, and its requests
// in the server.
type process struct {
	limiter  *adaptive.Limiter
	shedder  *shed.Shedder
	inServer int
}

// callback is a function registered with Env.Every.
type callback struct {
	every time.Duration
	f     func()
}

// Run simulates cfg and returns its result. It fails only on an invalid
// Config (ErrInvalidConfig) or an error from cfg.Limiter.
func Run(cfg Config) (*Result, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	e := &engine{
		cfg:      c,
		arrivals: rand.New(rand.NewPCG(c.Seed, 1)),
		service:  rand.New(rand.NewPCG(c.Seed, 2)),
		workers:  c.Workers,
	}
	total := 0.0
	for _, cl := range c.Classes {
		total += cl.Weight
	}
	acc := 0.0
	for _, cl := range c.Classes {
		acc += cl.Weight / total
		e.cumWeight = append(e.cumWeight, acc)
	}
	e.classBusy = make([]int, len(c.Classes))
	lr := rand.New(rand.NewPCG(c.Seed, 3))
	e.procs = make([]process, c.Processes)
	for i := range e.procs {
		p := &e.procs[i]
		env := Env{
			Now:      func() time.Time { return epoch.Add(e.now) },
			Rand:     lr.Float64,
			Process:  i,
			InFlight: func() int { return p.inServer },
			Every: func(d time.Duration, f func()) {
				if d <= 0 {
					panic("sim: Env.Every needs a positive period")
				}
				e.callbacks = append(e.callbacks, callback{every: d, f: f})
				e.events.push(event{at: e.now + d, kind: evCallback, arg: len(e.callbacks) - 1})
			},
		}
		if c.Limiter != nil {
			if p.limiter, err = c.Limiter(env); err != nil {
				return nil, err
			}
		}
		if c.Shedder != nil {
			env.Limiter = p.limiter
			if p.shedder, err = c.Shedder(env); err != nil {
				return nil, err
			}
		}
	}
	// Size the request log for the expected arrivals plus a margin, so that
	// it does not grow by copying (which the race detector makes costly).
	expected := 0.0
	for _, p := range c.Phases {
		expected += p.Load * c.Capacity() * p.Duration.Seconds()
	}
	e.reqs = make([]request, 0, int(expected*1.05)+1024)
	var end time.Duration
	spans := make([]Span, len(c.Phases))
	for i, p := range c.Phases {
		e.events.push(event{at: end, kind: evPhase, arg: i})
		spans[i] = Span{Name: p.Name, Start: end, End: end + p.Duration}
		end += p.Duration
	}
	e.events.push(event{at: c.Interval, kind: evTick})
	e.bucket.Phase = c.Phases[0].Name
	for len(e.events.ev) > 0 {
		ev := e.events.pop()
		if ev.at > end {
			break
		}
		e.now = ev.at
		switch ev.kind {
		case evPhase:
			e.startPhase(ev.arg)
		case evArrival:
			if ev.arg == e.generation {
				e.arrive()
			}
		case evCompletion:
			e.complete(ev.arg)
		case evCallback:
			cb := e.callbacks[ev.arg]
			cb.f()
			e.events.push(event{at: e.now + cb.every, kind: evCallback, arg: ev.arg})
		case evTick:
			e.tick()
			if next := e.now + c.Interval; next <= end {
				e.events.push(event{at: next, kind: evTick})
			}
		}
	}
	for i := range e.reqs {
		if e.reqs[i].outcome == Unfinished {
			e.reqs[i].done = end
		}
	}
	return &Result{Config: c, Phases: spans, Series: e.series, reqs: e.reqs, end: end}, nil
}

func (e *engine) startPhase(i int) {
	p := e.cfg.Phases[i]
	e.phase = i
	if p.Workers > 0 {
		e.workers = p.Workers
		e.startService()
	}
	// Arrivals are memoryless, so the new rate takes effect by dropping the
	// pending arrival and drawing the next one from now.
	e.generation++
	e.rate = p.Load * e.cfg.Capacity()
	e.scheduleArrival()
}

func (e *engine) scheduleArrival() {
	if e.rate <= 0 {
		return
	}
	gap := time.Duration(e.arrivals.ExpFloat64() / e.rate * float64(time.Second))
	e.events.push(event{at: e.now + gap, kind: evArrival, arg: e.generation})
}

func (e *engine) arrive() {
	e.scheduleArrival()
	class := 0
	if len(e.cumWeight) > 1 {
		u := e.arrivals.Float64()
		class = min(len(e.cumWeight)-1, sortSearch(e.cumWeight, u))
	}
	// Draw a process only when there is a choice, so that runs of one
	// process keep the random streams they always had.
	proc := 0
	if len(e.procs) > 1 {
		proc = e.arrivals.IntN(len(e.procs))
	}
	p := &e.procs[proc]
	e.bucket.offered++
	cl := &e.cfg.Classes[class]
	r := request{arrival: e.now, class: int32(class), process: int32(proc)}
	switch {
	case cl.MaxInFlight > 0 && e.classBusy[class] >= cl.MaxInFlight:
		r.outcome = Capped
		e.bucket.rejected++
		e.reqs = append(e.reqs, r)
		return
	case p.shedder != nil:
		if d := p.shedder.Allow(cl.Name); !d.Allowed {
			r.outcome = Shed
			r.util = float64(e.inServer()) / float64(e.workers)
			r.gauge = d.Utilization
			e.bucket.rejected++
			e.reqs = append(e.reqs, r)
			return
		}
	}
	if p.limiter != nil {
		tok, err := p.limiter.AcquirePartition(context.Background(), cl.Name)
		if err != nil {
			r.outcome = Rejected
			e.bucket.rejected++
			e.reqs = append(e.reqs, r)
			return
		}
		r.tok = tok
	}
	e.classBusy[class]++
	p.inServer++
	e.reqs = append(e.reqs, r)
	e.queue = append(e.queue, len(e.reqs)-1)
	e.startService()
}

// inServer is the number of admitted requests in the server (queued or in
// service).
func (e *engine) inServer() int { return e.busy + len(e.queue) - e.head }

// startService moves queued requests into free workers.
func (e *engine) startService() {
	for e.busy < e.workers && e.head < len(e.queue) {
		n := e.inServer()
		i := e.queue[e.head]
		e.head++
		if e.head > 1024 && e.head*2 > len(e.queue) {
			e.queue = append(e.queue[:0], e.queue[e.head:]...)
			e.head = 0
		}
		e.busy++
		d := float64(e.cfg.ServiceTime)
		if st := e.cfg.Classes[e.reqs[i].class].ServiceTime; st > 0 {
			d = float64(st)
		}
		if e.cfg.Service == Lognormal {
			s := e.cfg.Sigma
			d *= math.Exp(s*e.service.NormFloat64() - s*s/2)
		}
		if over := n - e.workers; over > 0 && e.cfg.Collapse > 0 {
			d *= 1 + e.cfg.Collapse*float64(over)/float64(e.workers)
		}
		e.events.push(event{at: e.now + time.Duration(d), kind: evCompletion, arg: i})
	}
}

func (e *engine) complete(i int) {
	e.busy--
	r := &e.reqs[i]
	r.done = e.now
	e.classBusy[r.class]--
	e.procs[r.process].inServer--
	latency := e.now - r.arrival
	deadline := e.cfg.Deadline
	if d := e.cfg.Classes[r.class].Deadline; d > 0 {
		deadline = d
	}
	if latency <= deadline {
		r.outcome = Good
		e.bucket.good++
		r.tok.Success()
	} else {
		r.outcome = Late
		r.tok.Dropped()
	}
	e.latencies = append(e.latencies, latency)
	e.startService()
}

// tick closes the current series bucket.
func (e *engine) tick() {
	secs := e.cfg.Interval.Seconds()
	p := e.bucket
	p.Time = e.now
	p.Offered = float64(p.offered) / secs
	p.Goodput = float64(p.good) / secs
	p.Rejected = float64(p.rejected) / secs
	p.InFlight = e.inServer()
	for i := range e.procs {
		if l := e.procs[i].limiter; l != nil {
			p.Limit += l.Limit()
		}
	}
	if len(e.latencies) > 0 {
		slices.Sort(e.latencies)
		p.P50 = percentile(e.latencies, 0.5)
		p.P99 = percentile(e.latencies, 0.99)
	}
	e.series = append(e.series, p)
	e.latencies = e.latencies[:0]
	e.bucket = Point{Phase: e.cfg.Phases[e.phase].Name}
}

// sortSearch returns the first index whose cumulative weight exceeds u.
func sortSearch(cum []float64, u float64) int {
	i, _ := slices.BinarySearch(cum, u)
	if i < len(cum) && cum[i] == u {
		i++
	}
	return i
}

// percentile returns the nearest-rank p-quantile of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}
