package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// Limiter serves decisions from per-key pools of units leased in batches
// from a remote floodgate.Limiter; see the package doc for what it
// guarantees. It is safe for concurrent use. Create one with New and Close
// it when done: it owns goroutines and holds units of the remote's quota.
// The zero value is not usable.
type Limiter struct {
	remote floodgate.Limiter
	alg    floodgate.Algorithm
	kind   step.Kind
	policy floodgate.Policy
	// window is the remote window whose end bounds a lease, in ns: the
	// window of a fixed or sliding window; 0 for the other kinds.
	window int64
	cfg    config

	entries *xsync.Map[string, *entry]
	jan     *janitor

	mu        sync.RWMutex   // guards closed against wg.Add
	closed    atomic.Bool    // set under mu; read without it
	wg        sync.WaitGroup // the janitor and the refills in flight
	closeDone chan struct{}  // closed when the first Close returns

	// Totals for Stats. local holds the hits of pools once moved out of
	// them (at each refill and when a pool is retired).
	local     atomic.Int64
	waited    atomic.Int64
	forwarded atomic.Int64
	leases    atomic.Int64
	leased    atomic.Int64
	returned  atomic.Int64
}

var _ floodgate.Limiter = (*Limiter)(nil)

// New returns a Limiter that leases units from remote, configured by opts
// (nil means the defaults). It starts a goroutine that Close stops.
//
// The pools lease units with remote's Apply (OpTakeUpTo) and give unused
// ones back with it (OpSettle). New returns an error matching
// floodgate.ErrInvalidConfig when remote is nil, reports an invalid
// algorithm or one whose policy disagrees with its own, or runs a leaky
// bucket, whose shaping leases would defeat, or a floodgate.Limits; and an
// error matching ErrInvalidOptions for unusable Options (for an invalid
// Options.Observer, floodgate.ErrInvalidConfig too).
//
// A Limits is refused because a pool's expiry follows one algorithm: units
// leased from a fixed or sliding window expire when the window that
// counted them ends, and a composite's limits end theirs at different
// instants, or never (a token bucket). Lease each limit's remote alone
// only if admitting under each separately is what you want; otherwise use
// the composite directly: it is one round trip per decision.
func New(remote floodgate.Limiter, opts *Options) (*Limiter, error) {
	if remote == nil {
		return nil, fmt.Errorf("%w: lease: nil remote limiter", floodgate.ErrInvalidConfig)
	}
	policy := remote.Policy()
	alg, err := remoteAlgorithm(remote, policy)
	if err != nil {
		return nil, err
	}
	if _, ok := alg.(floodgate.Limits); ok {
		return nil, fmt.Errorf("%w: lease: the remote runs a Limits (%v), whose limits would expire leased units at different instants; use the remote directly", floodgate.ErrInvalidConfig, alg)
	}
	kind, err := step.KindOf(alg)
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	l := &Limiter{
		remote:    remote,
		alg:       alg,
		kind:      kind,
		policy:    policy,
		entries:   xsync.NewMap[string, *entry](),
		jan:       newJanitor(),
		closeDone: make(chan struct{}),
	}
	switch l.kind {
	case step.KindTokenBucket, step.KindSlidingLog:
	case step.KindFixedWindow, step.KindSlidingWindow:
		l.window = int64(policy.Window)
	case step.KindLeakyBucket:
		return nil, fmt.Errorf("%w: lease: the remote runs a leaky bucket, whose shaping leases would defeat (a pool admits its units at once); use the remote directly", floodgate.ErrInvalidConfig)
	default:
		return nil, fmt.Errorf("%w: lease: unknown algorithm kind %v", floodgate.ErrInvalidConfig, l.kind)
	}
	if l.cfg, err = opts.resolve(policy.Quota); err != nil {
		return nil, err
	}
	l.wg.Add(1)
	go l.runJanitor()
	return l, nil
}

// remoteAlgorithm returns the algorithm remote runs, checked against its
// policy.
func remoteAlgorithm(remote floodgate.Limiter, policy floodgate.Policy) (floodgate.Algorithm, error) {
	alg := remote.Algorithm()
	if alg == nil {
		return nil, fmt.Errorf("%w: lease: %T reports no algorithm", floodgate.ErrInvalidConfig, remote)
	}
	if err := alg.Validate(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if alg.Policy() != policy {
		return nil, fmt.Errorf("%w: lease: algorithm %v has policy %+v, the remote %+v", floodgate.ErrInvalidConfig, alg, alg.Policy(), policy)
	}
	if policy.Quota < 1 || policy.Window <= 0 {
		return nil, fmt.Errorf("%w: lease: the remote's policy %+v has no quota", floodgate.ErrInvalidConfig, policy)
	}
	return alg, nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (floodgate.Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN admits n units now or denies them. When the key's pool holds n
// units it admits them without a lock, an allocation or a round trip, and
// ignores ctx. Otherwise it waits, bounded by ctx, for the key's refill in
// flight or one it starts, and serves n units from the refilled pool; when
// the remote has no units left it denies with the remote's Decision. A
// request the pool cannot serve after that (more units than MaxBatch, or a
// pool drained by concurrent callers while the remote still had units) goes
// to the remote's AllowN. A denial changes no state.
//
// An admitted Decision reports the remote's Limit, Delay 0, and estimates
// in Remaining and ResetAfter: Remaining is the units left in this
// process's pool plus the remote's Remaining at the key's last lease;
// ResetAfter is the remote's at that lease, counted down on the local clock
// for the window algorithms (whose decisions read the clock anyway) and as
// it was for the token bucket and the sliding log (whose decisions do not).
// Neither sees what other processes consumed since the last lease. A pool
// refilled every TargetInterval keeps them that fresh.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	// A key in the map passed CheckKey when it was added.
	if e, ok := l.entries.Load(key); ok && n >= 1 && n <= l.policy.Quota {
		if p, left, now, ok := l.take(e, n, true); ok {
			return l.decision(p, left, now), nil
		}
	}
	if err := l.check(key, n); err != nil {
		return floodgate.Decision{}, err
	}
	d, decided, err := l.acquire(ctx, key, n, true)
	if err != nil || decided {
		return d, err
	}
	l.forwarded.Add(1)
	return l.remote.AllowN(ctx, key, n)
}

// Reserve admits n units to proceed after Decision.Delay, at most maxDelay.
// A pool admits only at once (Delay 0), as AllowN does; when it cannot
// serve n units, even after waiting for a refill, Reserve goes to the
// remote's Reserve, which may admit with a delay. Reserve(ctx, key, n, 0)
// is AllowN.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (floodgate.Decision, error) {
	if maxDelay < 0 {
		return floodgate.Decision{}, fmt.Errorf("%w: got %v", floodgate.ErrInvalidDelay, maxDelay)
	}
	if maxDelay == 0 {
		return l.AllowN(ctx, key, n)
	}
	if e, ok := l.entries.Load(key); ok && n >= 1 && n <= l.policy.Quota {
		if p, left, now, ok := l.take(e, n, true); ok {
			return l.decision(p, left, now), nil
		}
	}
	if err := l.check(key, n); err != nil {
		return floodgate.Decision{}, err
	}
	d, decided, err := l.acquire(ctx, key, n, false)
	if err != nil || decided {
		return d, err
	}
	l.forwarded.Add(1)
	return l.remote.Reserve(ctx, key, n, maxDelay)
}

// Wait admits n units, waiting if needed. A pool admits at once; when it
// cannot serve n units, even after waiting for a refill, Wait is the
// remote's Wait (which sleeps until the units may proceed and gives them
// back if ctx ends first, where the algorithm allows). A ctx that has
// already ended returns its error and takes nothing.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	if err := ctx.Err(); err != nil {
		// A caller that has given up takes no units, as with the remote.
		return err
	}
	if e, ok := l.entries.Load(key); ok && n >= 1 && n <= l.policy.Quota {
		if _, _, _, ok := l.take(e, n, true); ok {
			return nil
		}
	}
	if err := l.check(key, n); err != nil {
		return err
	}
	_, decided, err := l.acquire(ctx, key, n, false)
	if err != nil || decided {
		return err
	}
	l.forwarded.Add(1)
	return l.remote.Wait(ctx, key, n)
}

// Algorithm returns the remote's algorithm.
func (l *Limiter) Algorithm() floodgate.Algorithm { return l.alg }

// Apply performs one step. OpTake is decided as AllowN (req.MaxDelay 0)
// or Reserve: from the key's pool when it can, otherwise by the remote's
// Apply. A pool's admission has Delay 0 and reports the local clock in
// Result.At. OpTakeUpTo and OpSettle go to the remote as they are: the
// units they take or give back are the remote's, never a pool's.
func (l *Limiter) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	if req.Op != floodgate.OpTake {
		return l.remote.Apply(ctx, key, req)
	}
	if req.MaxDelay < 0 {
		return floodgate.Result{}, fmt.Errorf("%w: got %v", floodgate.ErrInvalidDelay, req.MaxDelay)
	}
	n := req.N
	if err := l.check(key, n); err != nil {
		return floodgate.Result{}, err
	}
	if e, ok := l.entries.Load(key); ok {
		if p, left, now, ok := l.take(e, n, true); ok {
			return l.pooled(l.decision(p, left, now), n), nil
		}
	}
	d, decided, err := l.acquire(ctx, key, n, req.MaxDelay == 0)
	if err != nil || decided {
		return l.pooled(d, n), err
	}
	l.forwarded.Add(1)
	return l.remote.Apply(ctx, key, req)
}

// pooled returns the Result of a decision made by a pool.
func (l *Limiter) pooled(d floodgate.Decision, n int64) floodgate.Result {
	res := floodgate.Result{Decision: d, At: time.Unix(0, l.cfg.now())}
	if d.Allowed {
		res.Granted = n
	}
	return res
}

// Policy returns the remote's policy.
func (l *Limiter) Policy() floodgate.Policy { return l.policy }

// check returns the error of arguments no decision accepts, or ErrClosed.
func (l *Limiter) check(key string, n int64) error {
	if err := step.CheckKey(key); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: got %d", floodgate.ErrInvalidN, n)
	}
	if n > l.policy.Quota {
		return fmt.Errorf("%w: n=%d, limit %d", floodgate.ErrExceedsLimit, n, l.policy.Quota)
	}
	if l.closed.Load() {
		return ErrClosed
	}
	return nil
}

// acquire serves n units from key's pool after waiting for a refill. It
// returns decided == false when the remote must decide: n is above
// MaxBatch, the remote had fewer units than the refill asked for (or none,
// unless final and n == 1, when the refill's denial is the decision, after
// a second refill if the first was short), or concurrent callers drained
// two refills in a row.
func (l *Limiter) acquire(ctx context.Context, key string, n int64, final bool) (floodgate.Decision, bool, error) {
	if n > l.cfg.maxBatch {
		return floodgate.Decision{}, false, nil
	}
	e := l.lookup(key)
	for round, retired := 0, 0; round < 2; round++ {
		if round == 0 {
			// The key may have units already: a new entry another caller
			// filled, or a refill that landed since the fast path.
			if p, left, now, ok := l.take(e, n, true); ok {
				return l.decision(p, left, now), true, nil
			}
		}
		r, err := l.startRefill(e, n, true)
		switch {
		case err == errDead && l.closed.Load():
			return floodgate.Decision{}, true, ErrClosed
		case err == errDead && retired < 8:
			// The janitor forgot the key between lookup and now.
			e = l.lookup(key)
			retired++
			round--
			continue
		case err == errDead:
			return floodgate.Decision{}, false, nil
		case err != nil:
			return floodgate.Decision{}, true, err
		case r == nil:
			// The pool held enough when the refill was sized.
			if p, left, now, ok := l.take(e, n, true); ok {
				return l.decision(p, left, now), true, nil
			}
			continue
		}
		if d, decided, err := l.await(ctx, e, r, n, final); decided {
			return d, true, err
		}
		if r.granted < r.asked && !(final && n == 1) {
			// The remote ran short: it decides n units exactly. One unit
			// waits for a second refill instead, which the callers that
			// lost this one share: the remote is likely out of units, and
			// its denial is then one round trip for all of them.
			break
		}
	}
	return floodgate.Decision{}, false, nil
}

// await waits for r, a refill of e that this caller joined (startRefill),
// and decides n units from it: decided is false when the caller must go
// on (others drained the units, or the remote ran short). Before it
// returns it tells r that this caller is done with it, having counted the
// decision it made in r, so that the round trip's Lease event reports
// exactly the decisions it served (Waited).
func (l *Limiter) await(ctx context.Context, e *entry, r *refill, n int64, final bool) (floodgate.Decision, bool, error) {
	defer r.joined.Done()
	select {
	case <-r.done:
	case <-ctx.Done():
		return floodgate.Decision{}, true, ctx.Err()
	}
	if r.err != nil {
		l.waitedFor(r)
		return floodgate.Decision{}, true, r.err
	}
	if p, left, now, ok := l.take(e, n, false); ok {
		l.waitedFor(r)
		return l.decision(p, left, now), true, nil
	}
	if r.granted == 0 && final && n == 1 && r.res.RetryAfter > 0 {
		// The remote had no unit: that is the decision for one unit.
		// For more units its RetryAfter (for one) would be too short.
		l.waitedFor(r)
		return floodgate.Decision{
			Limit:      l.policy.Quota,
			Remaining:  max(r.res.Remaining, 0),
			RetryAfter: r.res.RetryAfter,
			ResetAfter: r.res.ResetAfter,
		}, true, nil
	}
	return floodgate.Decision{}, false, nil
}

// waitedFor counts a decision made after waiting for r.
func (l *Limiter) waitedFor(r *refill) {
	l.waited.Add(1)
	r.decided.Add(1)
}

// lookup returns key's entry, adding one if needed.
func (l *Limiter) lookup(key string) *entry {
	e, _ := l.entries.LoadOrCompute(key, func() (*entry, bool) { return newEntry(key), false })
	return e
}

// enter registers a goroutine with wg unless the Limiter is closed.
func (l *Limiter) enter() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return false
	}
	l.wg.Add(1)
	return true
}

// Stats returns the Limiter's cumulative counts. It visits every key, and
// counts a decision that races with a pool's retirement at most once but
// possibly not at all.
func (l *Limiter) Stats() Stats {
	s := Stats{
		Waited:    l.waited.Load(),
		Forwarded: l.forwarded.Load(),
		Leases:    l.leases.Load(),
		Leased:    l.leased.Load(),
		Returned:  l.returned.Load(),
	}
	local := l.local.Load()
	for _, e := range l.entries.AllRelaxed() {
		if p := e.pool.Load(); p != nil {
			local += p.hits.Load()
		}
	}
	s.Local = local
	return s
}

// Close gives the units held in pools back to the remote, where its
// algorithm allows (see the package doc), and stops the Limiter's
// goroutines after the refills in flight end, whose units it gives back
// too. Decisions after Close fail with ErrClosed. Close returns the
// refunds' errors; the units of a failed refund stay consumed at the
// remote. It is safe to call more than once: later calls wait for the
// first and return nil.
func (l *Limiter) Close() error {
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		<-l.closeDone
		return nil
	}
	l.closed.Store(true)
	l.mu.Unlock()
	defer close(l.closeDone)
	close(l.jan.stop)
	l.wg.Wait() // no refill runs or starts after this
	now := l.cfg.now()
	var jobs []returnJob
	for _, e := range l.entries.All() {
		e.mu.Lock()
		e.dead = true
		if p := e.pool.Load(); p != nil {
			e.pool.Store(nil)
			jobs = append(jobs, l.retireLocked(e, p, returnClosed, now)...)
		}
		e.mu.Unlock()
	}
	l.entries.Clear()
	return l.giveBack(jobs)
}
