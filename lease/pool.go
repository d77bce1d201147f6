package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/step"
)

// entry is the lease state of one key.
//
// Lock discipline: decisions served from the pool touch only atomics (pool,
// the pool's counters, fill, quiet). mu guards the rest and every change of
// pool, and is never held during a round trip or an observer call. Lock
// order: entry.mu, then Store.mu or the map's bucket lock; janitor.mu is
// never held with another lock.
type entry struct {
	b   *binding // the limiter whose key it is
	key string
	// pool serves decisions; nil when the key holds no units.
	pool atomic.Pointer[pool]
	// fill is the refill in flight, nil when none: at most one per key.
	fill atomic.Pointer[refill]
	// quiet is the local instant (ns) before which no background refill
	// starts, after the remote denied one: a key over its quota does not
	// cost a round trip per decision that drains the pool.
	quiet atomic.Int64

	mu   sync.Mutex
	dead bool // removed from the map; a caller holding it looks the key up again
	// batch is the current batch size; rate the smoothed consumption in
	// units per ns, measured between refills from out (units consumed,
	// cumulative) at markAt.
	batch   int64
	rate    float64
	markOut int64
	markAt  int64
	// leased and dropped are the units put in pools and taken out unused,
	// cumulative; what is neither left nor dropped was consumed.
	leased  int64
	dropped int64
	// lastLease is the local instant the last lease round trip ended;
	// short is whether it granted fewer units than it asked for.
	lastLease int64
	short     bool
	// local counts decisions served by retired pools since the last
	// lease round trip; waiters counts those that waited for the last
	// refill.
	local   int64
	waiters int64

	// With Options.Fleet: share is the most units this process may hold
	// (0, none, until the key's second record); sharedAt the local
	// instant the demand was last recorded and shareMark the units
	// consumed and denied by then; sharing is true while it is recorded.
	share     int64
	sharedAt  int64
	shareMark int64
	sharing   bool
	// denied counts the units of takes denied, cumulative: with consumed
	// units, the demand a Fleet is told.
	denied atomic.Int64

	// due and hidx are the janitor's, guarded by janitor.mu.
	due  int64
	hidx int
}

func newEntry(b *binding, key string) *entry { return &entry{b: b, key: key, hidx: -1} }

// pool is a set of leased units that share a deadline. The first seven
// fields are what a decision reads or writes: they share one cache line.
type pool struct {
	left      atomic.Int64 // units available
	hits      atomic.Int64 // decisions served, not yet moved to the totals
	deadline  atomic.Int64 // local ns at which the units expire
	remaining atomic.Int64 // the remote's Decision.Remaining at the last lease
	resetAt   atomic.Int64 // local ns at which the remote's quota is restored
	resetFor  atomic.Int64 // the remote's ResetAfter at the last lease, ns
	lowWater  atomic.Int64 // a decision that leaves fewer starts a refill

	// start is the local instant the first lease of the pool was asked for;
	// a clock reading before it expires the pool. Immutable.
	start int64

	// The rest is guarded by entry.mu.
	// window is the start of the remote window the units were counted in
	// (window kinds; 0 otherwise), and winDeadline the local instant at
	// which that window ends at the latest.
	window      int64
	winDeadline int64
	// refundable is false for units a remote's failure policy admitted
	// without counting them (see grantRefundable).
	refundable bool
	// grants are the leases whose units may still be in the pool, oldest
	// first, for refunds.
	grants []grant
}

// grant is one lease: n units admitted for the instant at.
type grant struct {
	at time.Time
	n  int64
}

// refill is one lease round trip. res, granted and err are written before
// done is closed and read after.
type refill struct {
	done  chan struct{}
	asked int64
	start int64 // local ns
	// waiters counts the callers that joined the refill to wait for it,
	// joined has each of them until it is done with it, and decided
	// counts the decisions they made from it.
	waiters atomic.Int64
	joined  sync.WaitGroup
	decided atomic.Int64

	res     floodgate.Result
	granted int64
	err     error
}

// The reasons of an observe.Return (see Options.Observer).
const (
	returnExpired  = "expired"
	returnReplaced = "replaced"
	returnClosed   = "closed"
)

// returnJob is units a pool gave up, to refund to the remote.
type returnJob struct {
	b      *binding
	key    string
	reason string // returnExpired, returnReplaced or returnClosed
	units  int64
	// parts are the refunds to make, newest lease first; none when the
	// units cannot or need not be given back.
	parts []grant
}

// errDead reports an entry removed from the map; the caller looks again.
var errDead = errors.New("lease: entry retired")

// take serves n units of e from its pool, without a lock, without
// allocating and without waiting, and returns the pool and what it left,
// for decision. count says whether to count the decision as served
// locally. (It returns scalars rather than a Decision: a struct returned
// through two calls costs more than the rest of a decision.)
//
// For the window algorithms it reads the clock: a unit must never be used
// after the end of the window it was counted in (see the package doc). The
// token bucket and the sliding log may use a unit at any time; their TTL
// only bounds hoarding, and the janitor enforces it, so their decisions
// skip the clock, which costs more than the rest of a decision.
func (l *binding) take(e *entry, n int64, count bool) (p *pool, left, now int64, ok bool) {
	p = e.pool.Load()
	if p == nil {
		return nil, 0, 0, false
	}
	if l.window > 0 {
		// The clock is read after the pool is loaded, so a decision's
		// instant is never before the lease that served it arrived.
		now = l.cfg.now()
		if now < p.start || now >= p.deadline.Load() {
			return nil, 0, 0, false
		}
	}
	v := p.left.Load()
	for {
		if v < n {
			return nil, 0, 0, false
		}
		if p.left.CompareAndSwap(v, v-n) {
			break
		}
		v = p.left.Load()
	}
	if count {
		p.hits.Add(1)
	}
	left = v - n
	if left < p.lowWater.Load() && e.fill.Load() == nil {
		l.prefetch(e, now)
	}
	return p, left, now, true
}

// join registers a caller that will wait for r; e.mu is held.
func (r *refill) join() {
	r.waiters.Add(1)
	r.joined.Add(1)
}

// prefetch starts a background refill of e, unless the remote recently
// denied one: once per batch, so it may take e.mu and a goroutine.
func (l *binding) prefetch(e *entry, now int64) {
	if now == 0 {
		now = l.cfg.now()
	}
	if now >= e.quiet.Load() {
		_, _ = l.startRefill(e, 0, false)
	}
}

// decision is the Decision of units taken from p, leaving left, at now
// (read only for the window algorithms).
func (l *binding) decision(p *pool, left, now int64) floodgate.Decision {
	reset := p.resetFor.Load()
	if l.window > 0 {
		reset = max(p.resetAt.Load()-now, 0)
	}
	return floodgate.Decision{
		Allowed:    true,
		Limit:      l.policy.Quota,
		Remaining:  left + p.remaining.Load(),
		ResetAfter: time.Duration(reset),
	}
}

// usable returns the units of p that decisions may take at now.
func usable(p *pool, now int64) int64 {
	if p == nil || now < p.start || now >= p.deadline.Load() {
		return 0
	}
	return max(p.left.Load(), 0)
}

// startRefill returns the refill of e in flight, or starts one for a caller
// that needs need units (0 for a background refill). A caller that will
// wait for the refill it returns (wait) joins it under e.mu, so that no
// caller joins after the round trip has counted them; it must then await
// it. It returns nil and no error when the pool already holds enough,
// errDead when e was retired and errClosed after Close.
func (l *binding) startRefill(e *entry, need int64, wait bool) (*refill, error) {
	e.mu.Lock()
	if r := e.fill.Load(); r != nil {
		if wait {
			r.join()
		}
		e.mu.Unlock()
		return r, nil
	}
	if e.dead {
		e.mu.Unlock()
		return nil, errDead
	}
	now := l.cfg.now()
	asked := l.sizeLocked(e, now, need)
	if asked <= 0 {
		e.mu.Unlock()
		return nil, nil
	}
	if !l.s.enter() {
		e.mu.Unlock()
		return nil, errClosed
	}
	r := &refill{done: make(chan struct{}), asked: asked, start: now}
	if wait {
		r.join()
	}
	e.fill.Store(r)
	e.mu.Unlock()
	go l.runRefill(e, r)
	return r, nil
}

// sizeLocked updates e's consumption rate and batch size and returns the
// units a refill asks for: a batch (about TargetInterval's consumption) on
// top of the usable units, or enough to bring them up to need, and never so
// many that a pool and its refill hold more than MaxBatch, nor more than
// the key's share with a Fleet (unless need asks for more). Asking a whole
// batch, rather than topping the pool up to one from its low-water mark,
// makes refills come about once per TargetInterval under steady demand
// (half as many round trips as a top-up, which the low-water mark would
// make every TargetInterval·(1−LowWater)).
func (l *binding) sizeLocked(e *entry, now, need int64) int64 {
	p := e.pool.Load()
	held := int64(0)
	if p != nil {
		held = p.left.Load()
	}
	have := usable(p, now)
	// Consumed units since the last sizing, over the time since, weighed
	// by that time: a measure over 2·TargetInterval or more replaces the
	// estimate, a shorter one moves it in proportion. A unit or two over
	// one round trip (a key's first refills, one right after another)
	// would otherwise read as a rate far above the key's and size a batch
	// to match, and a long quiet stretch would take many refills to be
	// believed. Bursts faster than the measure are the doubling's (below).
	out := e.leased - e.dropped - held
	if e.markAt != 0 && now > e.markAt {
		span := float64(now - e.markAt)
		r := float64(out-e.markOut) / span
		e.rate += (r - e.rate) * min(span/float64(2*l.cfg.targetInterval), 1)
	}
	e.markOut, e.markAt = out, now
	ceiling := l.cfg.maxBatch
	if e.share > 0 {
		ceiling = min(ceiling, e.share)
	}
	b := float64(ceiling)
	if want := math.Ceil(e.rate * float64(l.cfg.targetInterval)); want < b {
		b = want
	}
	batch := max(int64(b), e.waiters) // room for the callers that waited last time
	if now-e.lastLease < l.cfg.targetInterval/4 && !e.short {
		// The last lease was used down to the low-water mark four times
		// faster than a batch is meant to last: a burst, which the rate
		// estimate lags (and does not see on a clock that has not moved).
		// Double. Not when the last lease came back short: a refill that
		// follows it at once is the remote running low, not a burst, and
		// doubling then would only make each process grab more of the
		// last units.
		batch = max(batch, 2*e.batch)
	}
	batch = min(max(batch, l.cfg.minBatch), ceiling)
	e.batch = batch
	if need > have {
		return max(batch, need) - have
	}
	return min(batch, ceiling-have)
}

// runRefill makes the round trip of r for e and installs what it leased.
func (l *binding) runRefill(e *entry, r *refill) {
	defer l.s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
	// A refill that fails leases nothing: one the remote made after all
	// (a timeout) is given back if the remote learns of it (UndoLate).
	res, err := l.remote.Apply(ctx, e.key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: r.asked, UndoLate: true}, nil)
	cancel()
	end := l.cfg.now()
	granted := int64(0)
	if err != nil {
		err = refillError(e.key, err)
	} else {
		// A remote never grants more than asked; if one did, the excess is
		// left unused rather than admitted.
		granted = min(max(res.Granted, 0), r.asked)
	}
	r.res, r.granted, r.err = res, granted, err

	var jobs []returnJob
	e.mu.Lock()
	switch {
	case granted > 0 && (e.dead || l.s.closed.Load()):
		jobs = append(jobs, returnJob{b: l, key: e.key, reason: returnClosed, units: granted,
			parts: refundParts(grantRefundable(res), []grant{{at: res.At.Add(res.Delay), n: granted}}, granted)})
	case granted > 0:
		jobs = l.installLocked(e, r, res, granted, end)
		e.quiet.Store(0)
	case err == nil:
		e.quiet.Store(end + int64(res.RetryAfter))
	default:
		// A failing remote: refills in the background pause for a
		// TargetInterval; callers with an empty pool still ask.
		e.quiet.Store(end + l.cfg.targetInterval)
	}
	e.lastLease, e.short = end, granted < r.asked
	// No caller joins r from here on: it is no longer e.fill.
	e.waiters = r.waiters.Load()
	local := e.local
	e.local = 0
	if p := e.pool.Load(); p != nil {
		h := p.hits.Swap(0)
		local += h
		l.s.local.Add(h)
	}
	e.fill.Store(nil)
	due := l.dueLocked(e)
	e.mu.Unlock()
	// Count the round trip before waking its waiters, so a caller that
	// waited for it sees it in Stats.
	l.s.leases.Add(1)
	l.s.leased.Add(granted)
	close(r.done)

	l.s.jan.schedule(e, due)
	if l.cfg.onLease != nil {
		// The event counts the decisions the round trip served: wait for
		// its callers to take their units (a few steps, none blocking).
		r.joined.Wait()
		// The round trip ran on this goroutine, for whichever callers
		// waited for it (each with a context of its own) or for none: its
		// context is the background's.
		l.cfg.onLease(context.Background(), observe.Lease{Name: l.name, Key: e.key, Units: r.asked, Granted: granted, Err: err,
			Latency: time.Duration(max(end-r.start, 0)), Local: local, Waited: r.decided.Load()})
	}
	_ = l.s.giveBack(jobs)
	if l.cfg.fleet != nil {
		l.shareFleet(e, end)
	}
}

// refillError wraps the error of a lease round trip. A context error there
// is the Store's own timeout (Options.Timeout), not the caller's: it is reported as the
// remote being unavailable.
func refillError(key string, err error) error {
	if !errors.Is(err, floodgate.ErrUnavailable) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return fmt.Errorf("%w: lease of %q timed out: %w", floodgate.ErrUnavailable, key, err)
	}
	return fmt.Errorf("lease of %q: %w", key, err)
}

// grantRefundable reports whether the units of res were counted by the
// remote. A step that grants units always leaves the quota short of fully
// restored (ResetAfter > 0); a grant with ResetAfter == 0 was made by a
// store's failure policy (redisstore's FailOpen) without counting anything,
// and refunding it would give the recovered remote units it never lost.
func grantRefundable(res floodgate.Result) bool { return res.ResetAfter > 0 }

// installLocked adds a lease to e's pool, or replaces the pool when the
// lease cannot share it; it returns the units of a replaced pool to give
// back.
func (l *binding) installLocked(e *entry, r *refill, res floodgate.Result, granted, end int64) []returnJob {
	at := res.At.Add(res.Delay)
	refundable := grantRefundable(res)
	window, winDeadline := int64(0), int64(math.MaxInt64)
	if l.window > 0 {
		// The units were counted in the remote window holding at; they
		// must be used before it ends. The remote's durations are
		// carried over to the local clock from the instant the request
		// left, which is before at: the local deadline is never later
		// than the remote window's end, whatever the clocks' offset.
		// The local deadline also ends 1/1024 of the time left early, so
		// that a local clock up to 0.1% slower than the remote's (NTP
		// keeps them within 0.01%) still ends it in time.
		a := at.UnixNano()
		window = floorDiv(a, l.window) * l.window
		left := window + l.window - a
		winDeadline = r.start + left - left/1024
	}
	deadline := min(winDeadline, r.start+l.cfg.ttl)
	lowWater := int64(math.Ceil(l.cfg.lowWater * float64(e.batch)))
	e.leased += granted
	cur := e.pool.Load()
	if cur != nil && end >= cur.start && end < cur.deadline.Load() &&
		cur.window == window && cur.refundable == refundable {
		cur.winDeadline = min(cur.winDeadline, winDeadline)
		cur.grants = appendGrant(l.kind, cur.grants, grant{at: at, n: granted}, cur.left.Load()+granted)
		cur.remaining.Store(res.Remaining)
		cur.resetAt.Store(end + int64(res.ResetAfter))
		cur.resetFor.Store(int64(res.ResetAfter))
		cur.lowWater.Store(lowWater)
		cur.deadline.Store(min(cur.winDeadline, r.start+l.cfg.ttl))
		cur.left.Add(granted)
		return nil
	}
	p := &pool{start: r.start, window: window, winDeadline: winDeadline, refundable: refundable,
		grants: []grant{{at: at, n: granted}}}
	p.left.Store(granted)
	p.deadline.Store(deadline)
	p.remaining.Store(res.Remaining)
	p.resetAt.Store(end + int64(res.ResetAfter))
	p.resetFor.Store(int64(res.ResetAfter))
	p.lowWater.Store(lowWater)
	e.pool.Store(p)
	if cur == nil {
		return nil
	}
	reason := returnExpired
	if cur.window != window && end < cur.deadline.Load() {
		reason = returnReplaced
	}
	return l.retireLocked(e, cur, reason, end)
}

// appendGrant records g in grants, which must cover held units. A token
// bucket refunds whatever the instant, and the units of a window's pool
// all belong to one window, so one record (the newest instant) suffices
// for them; a sliding log refunds per instant and keeps one record per
// lease, dropping the oldest ones that no unit still held can belong to
// (units are taken oldest first).
func appendGrant(kind step.Kind, grants []grant, g grant, held int64) []grant {
	if kind != step.KindSlidingLog {
		total := g.n
		for _, old := range grants {
			total += old.n
		}
		return append(grants[:0], grant{at: g.at, n: total})
	}
	grants = append(grants, g)
	total := int64(0)
	for _, old := range grants {
		total += old.n
	}
	drop := 0
	for drop < len(grants)-1 && total-grants[drop].n >= held {
		total -= grants[drop].n
		drop++
	}
	if drop > 0 {
		grants = append(grants[:0], grants[drop:]...)
	}
	return grants
}

// refundParts splits units over grants, newest first: the units still held
// belong to the newest leases, since a pool is consumed oldest first.
func refundParts(refundable bool, grants []grant, units int64) []grant {
	if !refundable || units <= 0 {
		return nil
	}
	var parts []grant
	for i := len(grants) - 1; i >= 0 && units > 0; i-- {
		n := min(units, grants[i].n)
		parts = append(parts, grant{at: grants[i].at, n: n})
		units -= n
	}
	return parts
}

// retireLocked empties p, which is no longer e's pool, and returns its
// unused units to give back. Decisions racing with it either took their
// units before the swap or find none: no unit is both used and returned.
func (l *binding) retireLocked(e *entry, p *pool, reason string, now int64) []returnJob {
	units := p.left.Swap(0)
	if h := p.hits.Swap(0); h != 0 {
		e.local += h
		l.s.local.Add(h)
	}
	if units <= 0 {
		return nil
	}
	e.dropped += units
	refundable := p.refundable
	if l.kind == step.KindFixedWindow && (reason == returnReplaced || now >= p.winDeadline) {
		// The remote's window has ended, or is ending within a round trip:
		// its count resets and a refund would come back empty.
		refundable = false
	}
	return []returnJob{{b: l, key: e.key, reason: reason, units: units, parts: refundParts(refundable, p.grants, units)}}
}

// dueLocked returns when the janitor next needs to look at e: the pool's
// deadline, or the end of e's idle time, or 0 while a refill is in flight
// (its end schedules e).
func (l *binding) dueLocked(e *entry) int64 {
	if p := e.pool.Load(); p != nil {
		return p.deadline.Load()
	}
	if e.fill.Load() != nil {
		return 0
	}
	return e.lastLease + l.cfg.ttl
}

// expire retires e's pool if it expired at now, and removes e from the map
// once it has been idle for a TTL. It returns the units to give back and
// when to look at e again (0: not before a refill schedules it).
func (l *binding) expire(e *entry, now int64) ([]returnJob, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return nil, 0
	}
	var jobs []returnJob
	if p := e.pool.Load(); p != nil && (now < p.start || now >= p.deadline.Load()) {
		e.pool.Store(nil)
		jobs = l.retireLocked(e, p, returnExpired, now)
	}
	switch {
	case e.pool.Load() != nil || e.fill.Load() != nil:
		return jobs, l.dueLocked(e)
	case now-e.lastLease < l.cfg.ttl:
		return jobs, e.lastLease + l.cfg.ttl
	}
	// Idle for a TTL: forget the key. A caller still holding e finds it
	// dead and looks the key up again.
	e.dead = true
	l.entries.Compute(e.key, func(cur *entry, loaded bool) (*entry, xsync.ComputeOp) {
		if loaded && cur == e {
			return nil, xsync.DeleteOp
		}
		return cur, xsync.CancelOp
	})
	return jobs, 0
}

// giveBack refunds the units of jobs to their remotes, a few at a time,
// and reports each job to Observer.OnReturn. It returns the refunds'
// errors.
func (s *Store) giveBack(jobs []returnJob) error {
	switch len(jobs) {
	case 0:
		return nil
	case 1:
		return jobs[0].giveBack()
	}
	const workers = 8
	errs := make([]error, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(jobs)); i = next.Add(1) - 1 {
				errs[i] = jobs[i].giveBack()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// giveBack refunds the units of j to its remote.
func (j returnJob) giveBack() error {
	l := j.b
	var back int64
	var errs []error
	for _, part := range j.parts {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
		res, err := l.remote.Apply(ctx, j.key, floodgate.Request{Op: floodgate.OpSettle, N: -part.n, At: part.at}, nil)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("lease: refund of %d units of %q: %w", part.n, j.key, err))
			continue
		}
		back += min(max(res.Granted, 0), part.n)
	}
	err := errors.Join(errs...)
	l.s.returned.Add(back)
	if l.cfg.onReturn != nil {
		l.cfg.onReturn(context.Background(), observe.Return{Name: l.name, Key: j.key, Units: j.units, Granted: back, Reason: j.reason, Err: err})
	}
	return err
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
