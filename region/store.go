package region

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults of Options.
const (
	// DefaultInterval is the default of Options.Interval.
	DefaultInterval = time.Second
	// DefaultMargin is the default of Options.Margin.
	DefaultMargin = 250 * time.Millisecond
	// DefaultMaxKeys is the default of Options.MaxKeys.
	DefaultMaxKeys = 1000
)

// Options configures a Store. A nil *Options means the defaults; so does
// the zero value of each field.
type Options struct {
	// Interval is the time from the end of one reconcile to the start of
	// the next (with Peers, the period of the region's schedule; see
	// NextReconcile): each makes at most two calls to the coordinator, and
	// a Store never starts a third within one Interval of the first.
	// Allocation follows a change of demand within about three intervals.
	// The default is 1s.
	Interval time.Duration

	// Margin is how close to a window boundary the Store treats the time
	// as uncertain: within it, decisions use the smaller of the two
	// windows' grants, and the reconciler gives nothing back. It must
	// exceed the skew between this Store's clock (Now) and the local
	// store's (Redis' TIME for redisstore). The default is 250ms.
	// WARNING: a skew above Margin can admit more than the quota near a
	// boundary.
	Margin time.Duration

	// Stale is how long after its last report another region counts as
	// gone when the windows it has not been granted yet are shared out:
	// its demand is then taken to be its floor. The default is three
	// intervals.
	Stale time.Duration

	// Timeout bounds each call to the coordinator and each local step of
	// the reconciler. The default is half the interval.
	Timeout time.Duration

	// MaxKeys is the most quotas (limiter name and key) reconciled per
	// interval: those with the most demand. The others keep the grants
	// they hold, and their floors in the windows they hold none for. The
	// default is 1,000.
	MaxKeys int

	// Now is the clock. It must agree with the local store's within Margin
	// and with the other regions' within a small part of the interval.
	// The default is time.Now.
	Now func() time.Time

	// Manual leaves reconciling to calls of Store.Reconcile: New starts no
	// goroutine. For simulators and tests that drive time.
	Manual bool

	// Hook, when set, is called by the reconciler between the steps of
	// its protocol, for fault injection. When it returns an error, the
	// reconciler stops there as a crashed process would: the interval
	// ends, and the Store forgets what a restart would lose (debits not
	// yet acknowledged, grants learned). Reconcile returns the error.
	// Hook runs on the reconciler's goroutine, which Close waits for: it
	// must not call Close itself (to emulate a kill, return an error and
	// Close the Store from another goroutine, or build a new one).
	Hook func(Step) error

	// Peers, when set, lets the processes of this region share one
	// reconciler: every process runs a Store with the region's name on
	// the region's local store and one Peers (rediscoord.NewPeers on the
	// region's Redis), and only the leader they elect calls the
	// coordinator, with the demand of all of them. Without it, each
	// Store reconciles alone: run one process per region, or accept that
	// each reports only its own demand and makes its own calls (see the
	// package doc).
	Peers Peers

	// OnError, when set, receives the errors of the background
	// reconciler's intervals. It is called outside every lock.
	OnError func(error)
}

// Step names a point between the steps of the reconciler's protocol, for
// Options.Hook.
type Step int

const (
	// StepRead is after the local counts were read and before the first
	// call to the coordinator (reports, and debits not yet acknowledged).
	StepRead Step = iota + 1
	// StepSynced is after the first call's reply was applied and before
	// any local debit.
	StepSynced
	// StepDebited is after the local debits (units taken out of the local
	// store) and before the second call reports them.
	StepDebited
	// StepSettled is after the second call returned and before its reply
	// is applied.
	StepSettled
)

// String returns the step's name.
func (s Step) String() string {
	switch s {
	case StepRead:
		return "read"
	case StepSynced:
		return "synced"
	case StepDebited:
		return "debited"
	case StepSettled:
		return "settled"
	}
	return fmt.Sprintf("Step(%d)", int(s))
}

// Steps returns every Step in protocol order.
func Steps() []Step { return []Step{StepRead, StepSynced, StepDebited, StepSettled} }

// Store is a floodgate.Store for one region: it decides every step on the
// region's local store, under the part of the global quota the region
// holds, and a reconciler moves that part between the regions through a
// Coordinator. It runs FixedWindow and CalendarWindow only. See the
// package doc.
//
// A Store is safe for concurrent use. The zero value is not usable: create
// one with New, and Close it to stop its reconciler.
type Store struct {
	local   floodgate.Store
	coord   Coordinator
	regions []Region
	self    int
	opts    Options
	nonce   string // makes transfer ids unique across processes and restarts

	mu       sync.Mutex // guards bindings
	bindings map[bindKey]*binding

	entries sync.Map // entryKey → *entry

	recMu   sync.Mutex // one reconcile at a time; guards the entries' reconciler fields
	seq     uint64
	led     atomic.Bool  // this Store led the region at its last Sync (with Peers)
	drained time.Time    // when it last drained the region's demand as its leader
	callAt  [2]time.Time // the starts of the last two calls to the coordinator, older first

	stats struct {
		intervals, calls, failed, maxCalls, debits, debited, stranded, late atomic.Int64
		syncs, failedSyncs, led                                             atomic.Int64
	}

	closed  atomic.Bool
	stop    context.CancelFunc
	done    chan struct{}
	closeMu sync.Mutex
}

var _ floodgate.Store = (*Store)(nil)

type bindKey struct {
	name string
	alg  string // algID of a FixedWindow or a CalendarWindow
}

// value returns a *FixedWindow or *CalendarWindow as its value, and any
// other algorithm (a nil pointer included) as it is.
func value(alg floodgate.Algorithm) floodgate.Algorithm {
	switch a := alg.(type) {
	case *floodgate.FixedWindow:
		if a != nil {
			return *a
		}
	case *floodgate.CalendarWindow:
		if a != nil {
			return *a
		}
	case *floodgate.TokenBucket:
		if a != nil {
			return *a
		}
	}
	return alg
}

// bucketSuffix ends the name under which a TokenBucket's quota is kept,
// on the local store and in the coordinator, so that it stays apart
// from a FixedWindow's under the same name (floodgate.Store: state is
// per name, key and kind).
const bucketSuffix = "#tb"

// splitBucket returns the FixedWindow a TokenBucket is split as (see the
// package doc, Token buckets): Burst/2 units per window of
// (Burst/2)/Rate·Per, rounded up to the microsecond, and the name it is
// kept under.
func splitBucket(name string, a floodgate.TokenBucket) (string, floodgate.FixedWindow, error) {
	if err := a.Validate(); err != nil {
		return "", floodgate.FixedWindow{}, fmt.Errorf("region: %w", err)
	}
	q := a.Burst / 2
	if q < 1 {
		return "", floodgate.FixedWindow{}, fmt.Errorf("%w: region: a TokenBucket splits as windows of Burst/2 units: Burst %d is below 2", floodgate.ErrInvalidConfig, a.Burst)
	}
	// ⌈q·Per/Rate⌉: Validate bounds Burst/Rate·Per by MaxWindow, but
	// q·Per alone may overflow 64 bits.
	hi, lo := bits.Mul64(uint64(q), uint64(a.Per))
	if hi >= uint64(a.Rate) {
		// Not after Validate; Div64 would panic.
		return "", floodgate.FixedWindow{}, fmt.Errorf("%w: region: a TokenBucket's (Burst/2)/Rate·Per is longer than floodgate.MaxWindow", floodgate.ErrInvalidConfig)
	}
	w, rem := bits.Div64(hi, lo, uint64(a.Rate))
	if rem != 0 {
		w++
	}
	// Windows are whole microseconds (floodgate.FixedWindow).
	const us = uint64(time.Microsecond)
	w = (w + us - 1) / us * us
	fw := floodgate.FixedWindow{Limit: q, Window: time.Duration(w)}
	if err := fw.Validate(); err != nil {
		return "", floodgate.FixedWindow{}, fmt.Errorf("region: a TokenBucket splits as windows of Burst/2 units: %w", err)
	}
	return name + bucketSuffix, fw, nil
}

// algID identifies a FixedWindow or a CalendarWindow by value, its time
// zone by name: two processes, or two LoadLocation calls, give one zone
// two pointers.
func algID(alg floodgate.Algorithm) string {
	switch a := alg.(type) {
	case floodgate.FixedWindow:
		return fmt.Sprintf("f/%d/%d", a.Limit, int64(a.Window))
	case floodgate.CalendarWindow:
		return fmt.Sprintf("c/%d/%s", a.Limit, CalendarTag(a))
	}
	return ""
}

type entryKey struct {
	b   *binding
	key string
}

// errClosed is the error of a step on a closed Store; it matches
// floodgate.ErrUnavailable and floodgate.ErrClosed.
var errClosed = fmt.Errorf("region: %w: %w", floodgate.ErrUnavailable, floodgate.ErrClosed)

// New returns the Store of the region named self among regions: it
// decides on local (the region's own store, such as a redisstore.Store on
// the region's Redis) and reconciles through coord. Every region's Store
// and the Coordinator must be built with the same regions. Unless
// opts.Manual is set, New starts the reconciler, which runs its first
// interval at once. It returns an error matching ErrInvalid for unusable
// arguments.
func New(local floodgate.Store, coord Coordinator, regions []Region, self string, opts *Options) (*Store, error) {
	if local == nil || coord == nil {
		return nil, fmt.Errorf("%w: nil local store or coordinator", ErrInvalid)
	}
	if err := CheckRegions(regions); err != nil {
		return nil, err
	}
	s := &Store{local: local, coord: coord, regions: append([]Region(nil), regions...), self: -1, bindings: map[bindKey]*binding{}}
	for i, r := range regions {
		if r.Name == self {
			s.self = i
		}
	}
	if s.self < 0 {
		return nil, fmt.Errorf("%w: region %q is not among the regions", ErrInvalid, self)
	}
	if opts != nil {
		s.opts = *opts
	}
	o := &s.opts
	switch {
	case o.Interval < 0, o.Margin < 0, o.Stale < 0, o.Timeout < 0, o.MaxKeys < 0:
		return nil, fmt.Errorf("%w: negative option", ErrInvalid)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Margin == 0 {
		o.Margin = DefaultMargin
	}
	if o.Stale == 0 {
		o.Stale = 3 * o.Interval
	}
	if o.Timeout == 0 {
		o.Timeout = o.Interval / 2
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand's documentation)
	s.nonce = hex.EncodeToString(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, make(chan struct{})
	if o.Manual {
		close(s.done)
	} else {
		go s.run(ctx)
	}
	return s, nil
}

// run reconciles until ctx ends. Alone, the next interval starts
// Interval after the end of the last, not on a ticker: a reconcile that
// ran long is not followed at once by another, so no span of one Interval
// ever holds more than one reconcile's two calls. With Peers it keeps to
// the region's schedule (NextReconcile), and space holds a call that
// would be a third within one Interval.
func (s *Store) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil && s.opts.OnError != nil {
			s.opts.OnError(err)
		}
		end := s.opts.Now()
		t.Reset(s.NextReconcile(end).Sub(end))
	}
}

// NextReconcile returns when the background reconciler runs next after a
// Reconcile that ended at end (on the Store's clock); simulators that
// drive a Manual Store use it to run one as the background reconciler
// would.
//
// Alone, that is Interval after end. With Peers, the region's processes
// keep to one schedule so that the leader counts each process's demand
// once per interval: the others sync at every multiple of Interval since
// the Unix epoch, and the leader reconciles half an interval after them,
// at the first such instant at least half an interval after end.
func (s *Store) NextReconcile(end time.Time) time.Time {
	I := s.opts.Interval
	if s.opts.Peers == nil {
		return end.Add(I)
	}
	off := time.Duration(0)
	if s.led.Load() {
		off = I / 2
	}
	from := end.Add(I / 2).Add(-off)
	next := windowStart(windowIndex(from, I)+1, I).Add(off)
	return next
}

// Leader reports whether this Store led its region at its last Sync with
// the Peers: whether it is the one that calls the coordinator. It is
// false without Peers.
func (s *Store) Leader() bool { return s.led.Load() }

// Close stops the reconciler and waits for it; later steps fail with an
// error matching floodgate.ErrUnavailable and floodgate.ErrClosed. It does
// not close the local store or the coordinator. Units the region holds
// stay with it until their windows end (they are stranded, never handed
// to another region). With Peers, a leader gives the lead up (one call to
// the Peers, bounded by Timeout). Close is safe to call twice.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.closed.Store(true)
	s.stop()
	<-s.done
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if s.opts.Peers != nil && s.led.Load() {
		// Give the lead up, so that another process takes it at its next
		// Sync rather than when the lease ends.
		s.led.Store(false)
		_, _ = s.sync(context.Background(), &PeerMessage{Member: s.nonce})
	}
	return nil
}

// Bind binds alg, which must be a FixedWindow, a CalendarWindow or a
// TokenBucket, under name: a window's Limit is the global quota per
// window, shared by the regions; a TokenBucket is split as the
// FixedWindow of Burst/2 units per (Burst/2)/Rate·Per (see the package
// doc, Token buckets). Binding one name and configuration twice gives
// Bounds that decide on the same state. It returns an error matching
// floodgate.ErrInvalidConfig for another algorithm, a TokenBucket whose
// Burst is below 2, or a window shorter than 4·Interval + 2·Margin (a
// calendar day counts as 23 hours).
func (s *Store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, errClosed
	}
	var limit int64
	var shortest time.Duration
	alg = value(alg)
	bucket, isBucket := alg.(floodgate.TokenBucket)
	if isBucket {
		var err error
		if name, alg, err = splitBucket(name, bucket); err != nil {
			return nil, err
		}
		if err := floodgate.CheckName(name); err != nil {
			return nil, fmt.Errorf("region: a TokenBucket's quota is kept under its name and %q: %w", bucketSuffix, err)
		}
	}
	switch a := alg.(type) {
	case floodgate.FixedWindow:
		limit, shortest = a.Limit, a.Window
	case floodgate.CalendarWindow:
		limit, shortest = a.Limit, 23*time.Hour
	default:
		return nil, fmt.Errorf("%w: region: %v: only a FixedWindow, a CalendarWindow or a TokenBucket can be split across regions", floodgate.ErrInvalidConfig, alg)
	}
	if err := alg.Validate(); err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	if min := 4*s.opts.Interval + 2*s.opts.Margin; shortest < min {
		if isBucket {
			return nil, fmt.Errorf("%w: region: a TokenBucket splits as windows of Burst/2 units, Burst/2/Rate·Per long: %v is shorter than 4·Interval + 2·Margin = %v (raise Burst or shorten Interval)", floodgate.ErrInvalidConfig, shortest, min)
		}
		return nil, fmt.Errorf("%w: region: window %v is shorter than 4·Interval + 2·Margin = %v", floodgate.ErrInvalidConfig, shortest, min)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := bindKey{name, algID(alg)}
	// A TokenBucket's Bound is its split's binding under a Bound of its
	// own, which knows the Burst (a process of the region's Peers may
	// have bound the split as a FixedWindow first).
	bound := func(b *binding) floodgate.Bound {
		if isBucket {
			return &bucketBound{b: b, burst: bucket.Burst}
		}
		return b
	}
	if b := s.bindings[k]; b != nil {
		return bound(b), nil
	}
	// Bind the local store once now, so that a configuration it refuses
	// fails here rather than on the first step.
	inner, err := s.local.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	b := &binding{s: s, name: name, alg: alg, limit: limit, win: newWindows(alg), floor: floorUnits(limit, s.regions[s.self].Floor),
		inner: map[int64]floodgate.Bound{limit: inner}}
	s.bindings[k] = b
	return bound(b), nil
}

// binding is the Bound of one name and FixedWindow or CalendarWindow.
type binding struct {
	s     *Store
	name  string
	alg   floodgate.Algorithm // as bound
	limit int64               // the global quota per window: alg's Limit
	win   *windows
	floor int64 // the region's floor, in units

	mu    sync.Mutex // guards inner
	inner map[int64]floodgate.Bound
	last  atomic.Pointer[limitBound] // the Bound at was last asked for: most decisions' limit
}

// algAt returns the binding's algorithm with limit units per window: the
// algorithm the local store decides under.
func (b *binding) algAt(limit int64) floodgate.Algorithm {
	switch a := b.alg.(type) {
	case floodgate.CalendarWindow:
		a.Limit = limit
		return a
	case floodgate.FixedWindow:
		a.Limit = limit
		return a
	}
	return b.alg // Bind makes bindings of the two above only
}

type limitBound struct {
	limit int64
	b     floodgate.Bound
}

var _ floodgate.Bound = (*binding)(nil)

// maxInner bounds the local Bounds cached per binding (one per limit
// used); beyond it the cache starts afresh. Binding is cheap, and the
// limits in use change slowly (at most one new one per key per interval).
const maxInner = 256

// at returns the local Bound that decides under limit units. All of them
// share the local state: the local store keys it by (name, key, kind),
// not by the limit (see floodgate.Store).
func (b *binding) at(limit int64) (floodgate.Bound, error) {
	if l := b.last.Load(); l != nil && l.limit == limit {
		return l.b, nil // without the lock, which decisions on many cores contend for
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ib := b.inner[limit]; ib != nil {
		b.last.Store(&limitBound{limit, ib})
		return ib, nil
	}
	ib, err := b.s.local.Bind(b.name, b.algAt(limit))
	if err != nil {
		return nil, err
	}
	if len(b.inner) >= maxInner {
		b.inner = map[int64]floodgate.Bound{b.limit: b.inner[b.limit]}
	}
	b.inner[limit] = ib
	b.last.Store(&limitBound{limit, ib})
	return ib, nil
}

func (b *binding) entry(key string) *entry {
	k := entryKey{b, key}
	if e, ok := b.s.entries.Load(k); ok {
		return e.(*entry)
	}
	e, _ := b.s.entries.LoadOrStore(k, &entry{b: b, key: key, id: b.quotaID(key), lastTick: b.s.opts.Now()})
	return e.(*entry)
}

// quotaID is the coordinator's QuotaMessage.ID of key's quota: QuotaID,
// and for a CalendarWindow its CalendarTag after a "|", so that calendars
// of one name that differ only in their zone or reset keep apart.
func (b *binding) quotaID(key string) string {
	if b.win.fixed > 0 {
		return QuotaID(b.name, key)
	}
	return QuotaID(b.name, key) + "|" + CalendarTag(b.win.cal)
}

// QuotaID is the coordinator's QuotaMessage.ID of the quota of key under
// the limiter named name: the name's length first, so that no two pairs
// give one ID.
func QuotaID(name, key string) string {
	return fmt.Sprintf("%d:%s:%s", len(name), name, key)
}

// Take is Apply of an OpTake of n units without delay; see Apply.
func (b *binding) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if !floodgate.ValidTake(key, n, b.limit) {
		if err := floodgate.CheckKey(key); err != nil {
			return floodgate.Decision{}, err
		}
		return floodgate.Decision{}, floodgate.CheckRequest(floodgate.Request{Op: floodgate.OpTake, N: n}, b.limit)
	}
	if b.s.closed.Load() {
		return floodgate.Decision{}, errClosed
	}
	e := b.entry(key)
	e.asked.Add(n)
	now := b.s.opts.Now()
	a := e.limitAt(now)
	if a < n {
		return b.denial(now, a).Decision, nil
	}
	res, err := b.decide(ctx, e, key, floodgate.Request{Op: floodgate.OpTake, N: n}, now, a)
	return res.Decision, err
}

// decide applies req on the local store under the limit a, chosen for
// the instant now. A step the local store decided in another window than
// now's (its clock ahead by more than Margin, or the step delayed that
// long on its way) whose limit exceeds the region's grant of that window
// is undone: its units are given back and the caller is told it was
// denied, so that a late step never admits beyond a grant. If the give-back
// fails the units stay counted, which only strands them.
func (b *binding) decide(ctx context.Context, e *entry, key string, req floodgate.Request, now time.Time, a int64) (floodgate.Result, error) {
	ib, err := b.at(a)
	if err != nil {
		return floodgate.Result{}, err
	}
	res, err := ib.Apply(ctx, key, req, nil)
	if err != nil || res.Granted <= 0 || req.Check {
		return res, err
	}
	if i := b.win.index(res.At); i != b.win.index(now) && a > e.view.Load().of(i, b.floor) {
		b.s.stats.late.Add(1)
		_, _ = ib.Apply(context.WithoutCancel(ctx), key, floodgate.Request{Op: floodgate.OpSettle, N: -res.Granted, At: res.At}, nil)
		d := b.denial(res.At, a)
		return d, nil
	}
	return res, nil
}

// denial is the Result of a step the region's allocation a cannot admit,
// decided without the local store.
func (b *binding) denial(now time.Time, a int64) floodgate.Result {
	end := b.win.start(b.win.index(now) + 1)
	wait := max(end.Sub(now), time.Nanosecond)
	return floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a, RetryAfter: wait, ResetAfter: wait}}
}

// checks is what every step checks first: the key, the request against
// limit, and that the Store is open.
func (b *binding) checks(key string, req floodgate.Request, limit int64) error {
	if err := floodgate.CheckKey(key); err != nil {
		return err
	}
	if err := floodgate.CheckRequest(req, limit); err != nil {
		return err
	}
	if b.s.closed.Load() {
		return errClosed
	}
	return nil
}

// Apply performs one step on the region's local store under the units the
// region holds of the quota for the current window (Decision.Limit
// reports them; see the package doc). It differs from a plain FixedWindow
// where a step would admit beyond them:
//
//   - OpTake never reserves into a later window: MaxDelay is taken as 0
//     (the region's grant of a later window is not known yet);
//   - an OpSettle charge (N > 0) is an OpTakeUpTo of N in the current
//     window: only the units the region still holds are charged (Granted
//     says how many), since a charge into debt would spend units another
//     region holds; a charge for an instant outside the current window
//     charges nothing. Give-backs (N < 0) are as FixedWindow's.
func (b *binding) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if err := b.checks(key, req, b.limit); err != nil {
		return floodgate.Result{}, err
	}
	e := b.entry(key)
	now := b.s.opts.Now()
	a := e.limitAt(now)
	switch {
	case req.Op == floodgate.OpTake:
		req.MaxDelay = 0
		if !req.Check {
			e.asked.Add(req.N)
		}
		if a < req.N {
			return b.denial(now, a), nil
		}
	case req.Op == floodgate.OpTakeUpTo:
		if !req.Check {
			e.asked.Add(req.N)
		}
		if a < 1 {
			return b.denial(now, a), nil
		}
	case req.Op == floodgate.OpSettle && req.N > 0:
		if b.win.index(req.At) != b.win.index(now) || a < 1 {
			res := b.denial(now, a)
			res.RetryAfter = 0
			return res, nil
		}
		req = floodgate.Request{Op: floodgate.OpTakeUpTo, N: req.N, Check: req.Check}
	default: // a give-back: the limit does not matter to it
		a = max(a, 1)
	}
	if req.Op == floodgate.OpSettle && req.N < 0 {
		ib, err := b.at(a)
		if err != nil {
			return floodgate.Result{}, err
		}
		return ib.Apply(ctx, key, req, each)
	}
	return b.decide(ctx, e, key, req, now, a)
}

// bucketBound is the Bound of a TokenBucket: the binding of the
// FixedWindow it splits as (see the package doc, Token buckets), whose
// Decisions report the Burst as their Limit, and which denies a take of
// more than the window's units (and at most the Burst) rather than
// refuse it: floodgate.Store allows no error for a take within the
// algorithm's quota.
type bucketBound struct {
	b     *binding
	burst int64
}

var _ floodgate.Bound = (*bucketBound)(nil)

func (w *bucketBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b := w.b
	if req.Op == floodgate.OpTake && req.N > b.limit {
		if err := b.checks(key, req, w.burst); err != nil {
			return floodgate.Result{}, err
		}
		e := b.entry(key)
		if !req.Check {
			e.asked.Add(req.N)
		}
		now := b.s.opts.Now()
		res := b.denial(now, e.limitAt(now))
		res.Limit = w.burst
		return res, nil
	}
	res, err := b.Apply(ctx, key, req, each)
	if err == nil {
		res.Limit = w.burst
	}
	return res, err
}

func (w *bucketBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	if n > w.b.limit {
		res, err := w.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
		return res.Decision, err
	}
	d, err := w.b.Take(ctx, key, n)
	if err == nil {
		d.Limit = w.burst
	}
	return d, err
}

// entry is the Store's state of one quota (binding and key).
type entry struct {
	b     *binding
	key   string
	id    string
	asked atomic.Int64 // units asked since the reconciler last looked
	view  atomic.Pointer[grants]

	// Reconciler fields, guarded by Store.recMu (lastTick is set at
	// creation, before the entry is shared).
	lastTick time.Time
	pending  []Debit         // debits taken locally, not yet acknowledged
	local    map[int64]int64 // units debited locally per window
	idle     int             // intervals in a row without demand
	pidle    int             // Syncs in a row without demand (with Peers)
	hist     [rateHistory]sample
	h0, nh   int  // the history is hist[h0 : h0+nh], circular
	changed  bool // the history holds only the interval demand changed in
	partial  int  // intervals a new leader measures that are dropped at the next (with Peers)
}

// grants holds the grants the region knows of, for up to three windows:
// immutable once published.
type grants struct {
	n   int
	idx [3]int64
	g   [3]int64
}

func (v *grants) of(i int64, floor int64) int64 {
	if v != nil {
		for k := range v.n {
			if v.idx[k] == i {
				return max(v.g[k], floor)
			}
		}
	}
	return floor
}

// limitAt returns the units the region may admit in all, in the window of
// now: its grant, or near a boundary the smaller of the grants of the two
// windows the local store's clock may be in.
func (e *entry) limitAt(now time.Time) int64 {
	b, v := e.b, e.view.Load()
	i := b.win.index(now)
	a := v.of(i, b.floor)
	m := b.s.opts.Margin
	if now.Sub(b.win.start(i)) < m {
		a = min(a, v.of(i-1, b.floor))
	}
	if b.win.start(i+1).Sub(now) <= m {
		a = min(a, v.of(i+1, b.floor))
	}
	return a
}

// learn records the grants of a reply (absolute values, which only grow).
func (e *entry) learn(ws [2]WindowState, self int) {
	old := e.view.Load()
	nv := &grants{}
	add := func(i, g int64) {
		g = max(g, old.of(i, 0))
		for k := range nv.n {
			if nv.idx[k] == i {
				nv.g[k] = max(nv.g[k], g)
				return
			}
		}
		nv.idx[nv.n], nv.g[nv.n] = i, g
		nv.n++
	}
	if old != nil {
		// Keep the window before the reply's, for decisions near its end.
		for k := range old.n {
			if old.idx[k] == ws[0].Index-1 {
				add(old.idx[k], old.g[k])
			}
		}
	}
	for _, s := range ws {
		if self < len(s.Granted) {
			add(s.Index, s.Granted[self])
		}
	}
	e.view.Store(nv)
}

// Allocation is what a region knows of its part of one quota.
type Allocation struct {
	// Window is the start of the current window.
	Window time.Time
	// Granted is the region's grant of the current window, and Next its
	// grant of the next, as far as it knows (its floor when it knows of
	// none).
	Granted, Next int64
	// Debited is the units it has given back in the current window.
	Debited int64
	// Limit is what its decisions use now: Granted, or near a boundary
	// the smaller of two windows' grants.
	Limit int64
}

// Allocation reports the region's allocation of the quota that the
// limiter named name (bound to this Store with alg) has for key, at the
// Store's clock. A quota the Store has not seen reports the floor.
func (s *Store) Allocation(name string, alg floodgate.Algorithm, key string) Allocation {
	alg = value(alg)
	if tb, ok := alg.(floodgate.TokenBucket); ok {
		var err error
		if name, alg, err = splitBucket(name, tb); err != nil {
			return Allocation{}
		}
	}
	s.mu.Lock()
	b := s.bindings[bindKey{name, algID(alg)}]
	s.mu.Unlock()
	if b == nil {
		return Allocation{}
	}
	e := b.entry(key)
	now := s.opts.Now()
	i := b.win.index(now)
	v := e.view.Load()
	s.recMu.Lock()
	debited := e.local[i]
	s.recMu.Unlock()
	return Allocation{Window: b.win.start(i), Granted: v.of(i, b.floor), Next: v.of(i+1, b.floor),
		Debited: debited, Limit: e.limitAt(now)}
}

// Stats counts what a Store's reconciler did.
type Stats struct {
	// Intervals is the number of reconciles run.
	Intervals int64
	// Calls is the number of calls to the coordinator (cross-region
	// calls), failed ones included; FailedCalls those that failed.
	Calls, FailedCalls int64
	// MaxCallsPerInterval is the most calls one reconcile made: at most 2.
	MaxCallsPerInterval int64
	// Debits is the number of debits taken locally, DebitedUnits their
	// units, and StrandedUnits the units of those never acknowledged (a
	// crash, a lost link, a window that ended first): given back locally,
	// never granted to another region.
	Debits, DebitedUnits, StrandedUnits int64
	// LateSteps counts steps the local store decided in a later window
	// than the Store's clock chose the limit for, under a limit above that
	// window's grant: they were undone and reported as denials. Any is a
	// sign that Margin is shorter than the clock skew plus the local
	// store's latency.
	LateSteps int64
	// With Options.Peers: Syncs is the number of calls to the Peers
	// (local calls), failed ones included, FailedSyncs those that failed,
	// and Led the intervals this Store reconciled as the region's leader.
	Syncs, FailedSyncs, Led int64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{
		Intervals: s.stats.intervals.Load(), Calls: s.stats.calls.Load(), FailedCalls: s.stats.failed.Load(),
		MaxCallsPerInterval: s.stats.maxCalls.Load(),
		Debits:              s.stats.debits.Load(), DebitedUnits: s.stats.debited.Load(), StrandedUnits: s.stats.stranded.Load(),
		LateSteps: s.stats.late.Load(),
		Syncs:     s.stats.syncs.Load(), FailedSyncs: s.stats.failedSyncs.Load(), Led: s.stats.led.Load(),
	}
}

// errHook wraps a Hook's error.
var errHook = errors.New("region: reconciler stopped by its hook")
