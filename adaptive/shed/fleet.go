package shed

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
)

// Load is the work a process holds and the work it can hold: one process's
// part of a fleet's load, or the fleet's total.
type Load struct {
	// InFlight is the work in progress, in any unit: requests in flight,
	// busy workers, queued jobs.
	InFlight float64
	// Capacity is the work, in the same unit, at a utilization of 1.
	Capacity float64
}

// Utilization returns InFlight/Capacity, or 0 when Capacity is not positive
// (no known capacity sheds nothing).
func (l Load) Utilization() float64 {
	if !(l.Capacity > 0) {
		return 0
	}
	return l.InFlight / l.Capacity
}

// LimiterLoad returns the load of l for a Fleet: its requests in flight over
// its limit. Each call takes l's mutex twice and does not allocate.
func LimiterLoad(l *adaptive.Limiter) func() Load {
	return func() Load {
		return Load{InFlight: float64(l.InFlight()), Capacity: float64(l.Limit())}
	}
}

// FleetSource shares load between the processes of a fleet, through a store
// that all of them reach (a Redis: see the package doc and the Fleet
// examples).
//
// Contract for implementers: Exchange records local as this process's
// current load, replacing what it recorded before, and returns the fleet's:
// the sum, over every live process and this one, of the load each last
// recorded. A process that stops exchanging (it was killed) must drop out of
// the sum within a bounded time, such as an expiry of a few Intervals, or
// its capacity is counted forever. Exchange may block until ctx ends, and is
// never called concurrently by one Fleet. An error leaves the Fleet on its
// previous reading.
type FleetSource interface {
	Exchange(ctx context.Context, local Load) (Load, error)
}

// FleetSourceFunc adapts a function to a FleetSource.
type FleetSourceFunc func(ctx context.Context, local Load) (Load, error)

// Exchange returns f(ctx, local).
func (f FleetSourceFunc) Exchange(ctx context.Context, local Load) (Load, error) {
	return f(ctx, local)
}

// FleetOptions configures NewFleet. A nil *FleetOptions, or a zero field,
// means the default.
type FleetOptions struct {
	// Interval is the time between exchanges with the FleetSource: other
	// processes' load is at most this old (plus one exchange). Between
	// exchanges the fleet's load moves: processes admit together on a view
	// that lags by up to an Interval, overshoot, then shed together on a
	// view that lags as much while the load drains, by about the arrival
	// rate beyond the threshold times Interval, over the capacity (the
	// Fleet's reading discounts a fall it has reason to expect, see
	// Utilization, but cannot see one coming). In the simulator
	// (adaptive/sim: 8 processes sharing 200 workers, lognormal service of
	// mean S, worst of 40 seeds), an Interval of S/40 kept every shed
	// request at 73.5% or more of the backend's true utilization (72.5%
	// with deterministic service, whose requests admitted together all end
	// together); S/20 shed some at 71.5%, S/10 at 69%, and S at 53%, with
	// sheddable requests overshooting to 0.935 times the workers. Set it to
	// a fortieth of the requests' mean duration or less. The default is
	// 10ms.
	Interval time.Duration
	// Timeout bounds each exchange of the background refresh. The default
	// is Interval.
	Timeout time.Duration
	// MaxAge is how old the fleet's load may get (no exchange succeeding in
	// that time) before Utilization falls back to this process's own load,
	// which is what every process would shed on without a fleet. It is
	// checked at each exchange. The default is 1s or 3·Interval, whichever
	// is longer.
	MaxAge time.Duration
	// Now is the clock of MaxAge. The default is time.Now.
	Now func() time.Time
	// Manual turns the background refresh off: the caller calls Sync, for
	// instance on a simulation's virtual clock. The default is false.
	Manual bool
	// OnError, when set, receives the error of every failed exchange, on
	// the goroutine that ran it, with no lock held. The default is none.
	OnError func(error)
}

// Fleet is a Gauge of a fleet's utilization, so that a Shedder on each
// process keeps a reserve across the whole fleet rather than per process.
// It reads its process's own load live and the rest of the fleet's from
// the last exchange with a FleetSource:
//
//	(others + mine now) / (fleet.Capacity - mine then + mine now)
//
// where others is fleet.InFlight - mine then, less the fall it has likely
// had since (see Utilization), so that its own changes count at once and
// other processes' rises within one Interval.
//
// Cost per request (Utilization): one call of the local load function (for
// LimiterLoad, two uncontended mutex acquisitions), one atomic load and a
// few float operations; no I/O, no clock, no lock of its own, no
// allocation. Cost per process: one FleetSource exchange (one Redis round
// trip for the recipe in the package doc) per Interval, off the request
// path.
//
// The zero value is not usable; create one with NewFleet. A Fleet is safe
// for concurrent use. Unless FleetOptions.Manual is set it runs one
// goroutine, which Close stops.
type Fleet struct {
	src      FleetSource
	local    func() Load
	interval time.Duration
	timeout  time.Duration
	maxAge   time.Duration
	now      func() time.Time
	onError  func(error)

	view    atomic.Pointer[fleetView] // nil: no fresh fleet load, use the local one
	syncing atomic.Bool
	// failed reports that the last exchange failed, so that the next one
	// measures no fall from a view older than an Interval. Only Sync,
	// serialized by syncing, touches it.
	failed bool

	stop      context.CancelFunc // nil with Manual
	done      chan struct{}
	closeOnce sync.Once
}

// fleetView is the result of one exchange.
type fleetView struct {
	fleet, local Load
	at           time.Time
	// others is the other processes' work in flight in the fleet's total,
	// fleet.InFlight - local.InFlight, and falling how far it is likely to
	// have fallen since they recorded it (<= 0): twice the fall between
	// the last two exchanges (see Utilization).
	others, falling float64
}

var _ Gauge = (*Fleet)(nil)

// NewFleet returns a Fleet that exchanges local() with src, configured by
// opts (nil means defaults), and starts its background refresh unless
// opts.Manual is set. Until the first exchange succeeds its utilization is
// the local load's.
func NewFleet(src FleetSource, local func() Load, opts *FleetOptions) (*Fleet, error) {
	if src == nil || local == nil {
		return nil, invalid("NewFleet needs a FleetSource and a local load")
	}
	var o FleetOptions
	if opts != nil {
		o = *opts
	}
	if o.Interval < 0 || o.Timeout < 0 || o.MaxAge < 0 {
		return nil, invalid("FleetOptions has a negative duration")
	}
	if o.Interval == 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = o.Interval
	}
	if o.MaxAge == 0 {
		o.MaxAge = max(time.Second, 3*o.Interval)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &Fleet{
		src: src, local: local, interval: o.Interval, timeout: o.Timeout, maxAge: o.MaxAge,
		now: o.Now, onError: o.OnError, done: make(chan struct{}),
	}
	if o.Manual {
		close(f.done)
		return f, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go f.refresh(ctx)
	return f, nil
}

// refresh exchanges every Interval until ctx ends.
func (f *Fleet) refresh(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		_ = f.Sync(sctx) // OnError has it
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Utilization returns the fleet's utilization, with this process's load read
// now and the others' as of the last exchange, less the fall they are likely
// to have had since; this process's own when the fleet's is older than
// MaxAge or was never fetched.
//
// The others' load is the lower of two estimates, so that the reading does
// not overstate a fleet whose load is falling faster than the exchanges
// follow (requests admitted together end together, and a reading an
// Interval old would shed on load that has left):
//
//   - their load at the exchange, less the same fraction as this process's
//     own load has fallen since (processes behind one load balancer rise and
//     fall together);
//   - their load at the exchange, less twice its fall between the last two
//     exchanges: their records were up to an Interval old at the exchange
//     and the reading is up to an Interval older, so up to two Intervals of
//     a fall the total has not seen yet, at the last Interval's rate. This
//     one holds only while this process's own load has not risen since the
//     exchange: a process that admits again is refilling the room the fall
//     left, as the others are, and counting the fall on would let the
//     fleet overshoot until the next exchange.
//
// Neither adds a rise, so the reading is never above what the exchange and
// this process's own load say; a rise of the others' load counts at the next
// exchange.
func (f *Fleet) Utilization() float64 {
	local := f.local()
	v := f.view.Load()
	if v == nil {
		return local.Utilization()
	}
	others := v.others
	var fall float64
	if mine := v.local.InFlight; local.InFlight <= mine {
		fall = v.falling
		if local.InFlight < mine && mine > 0 {
			fall = min(fall, others*(local.InFlight-mine)/mine)
		}
	}
	return Load{
		// The estimate stops at 0, or at the total's own figure when that
		// is below 0 (a FleetSource at odds with itself): never a rise.
		InFlight: max(min(others, 0), others+fall) + local.InFlight,
		Capacity: v.fleet.Capacity - v.local.Capacity + local.Capacity,
	}.Utilization()
}

// Sync runs one exchange with the FleetSource now. It returns the
// exchange's error, wrapped; the Fleet keeps its previous reading then, and
// drops it once it is older than MaxAge. If another Sync of this Fleet is
// running, Sync returns nil at once without exchanging (exchanges never
// overlap, and no lock is held around the FleetSource).
func (f *Fleet) Sync(ctx context.Context) error {
	if !f.syncing.CompareAndSwap(false, true) {
		return nil
	}
	defer f.syncing.Store(false)
	local := f.local()
	fleet, err := f.src.Exchange(ctx, local)
	if err == nil && (math.IsNaN(fleet.InFlight) || math.IsNaN(fleet.Capacity) || math.IsInf(fleet.InFlight, 0) || math.IsInf(fleet.Capacity, 0)) {
		err = fmt.Errorf("fleet load %+v is not finite", fleet)
	}
	now := f.now()
	if err != nil {
		f.failed = true
		if v := f.view.Load(); v != nil && now.Sub(v.at) > f.maxAge {
			f.view.CompareAndSwap(v, nil)
		}
		err = fmt.Errorf("shed: fleet exchange: %w", err)
		if f.onError != nil {
			f.onError(err)
		}
		return err
	}
	v := &fleetView{fleet: fleet, local: local, at: now, others: fleet.InFlight - local.InFlight}
	if prev := f.view.Load(); prev != nil && !f.failed {
		v.falling = 2 * min(0, v.others-prev.others)
	}
	f.failed = false
	f.view.Store(v)
	return nil
}

// Close stops the background refresh, cancelling an exchange in progress,
// and waits for it to end. It is safe to call more than once, and returns
// nil.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		if f.stop != nil {
			f.stop()
		}
	})
	<-f.done
	return nil
}
