package inflight

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// Defaults of Options.
const (
	// DefaultTTL is the default of Options.TTL.
	DefaultTTL = 10 * time.Second
	// DefaultRetryAfter is the default of Options.RetryAfter.
	DefaultRetryAfter = time.Second
)

// MinTTL is the shortest Options.TTL: Redis expires keys in whole
// milliseconds.
const MinTTL = time.Millisecond

// Errors. They are matched with errors.Is. Bad keys are floodgate's
// ErrEmptyKey and ErrKeyTooLong, unusable options and limits
// floodgate.ErrInvalidConfig, failing stores floodgate.ErrUnavailable, and
// an Acquire on a closed Limiter floodgate.ErrClosed.
var (
	// ErrInvalidHold reports a Hold given to a store that did not grant
	// it.
	ErrInvalidHold = errors.New("inflight: hold not granted by this store")
)

// errClosed is the error of an Acquire on a closed Limiter.
var errClosed = fmt.Errorf("inflight: limiter closed: %w", floodgate.ErrClosed)

// Options configures a Limiter. A nil *Options means the defaults; so does
// the zero value of each field.
type Options struct {
	// TTL is how long a slot stays taken after its holder's last sign of
	// life, on a store whose holds expire (redisstore): a process that dies
	// holding slots (killed, or cut off from Redis) frees them within TTL.
	// The Limiter renews the slots of longer requests for them (see
	// RenewEvery). The default is 10s; the least is MinTTL. Holds of an
	// in-process store (LocalStore) do not expire, and ignore it.
	TTL time.Duration

	// RenewEvery is how often the Limiter renews each slot still held, on
	// a store whose holds expire, counted from its acquisition: a request
	// shorter than RenewEvery costs no renewal. It must be less than TTL;
	// the margin is what a renewal may take, and how many renewals may
	// fail in a row (Redis down, a breaker open) before a live request
	// loses its slot: a failed renewal is tried again RenewEvery later.
	// The default is TTL/3: one renewal may fail, and the next still comes
	// a third of the TTL before the hold expires.
	RenewEvery time.Duration

	// RetryAfter is the Status.RetryAfter of a denial: the hint a client
	// is given. A slot frees as soon as any request of the key ends, so no
	// exact time exists; the default is 1s.
	RetryAfter time.Duration

	// Name names the Limiter: a key's holds in the Store are those of the
	// key under this name, and the events the Limiter reports carry it
	// (observe.Acquire.Name, observe.Release.Name). Limiters of one name
	// on one store share each key's holds, whatever their limits (the
	// processes of a fleet, or a limit changed during a rolling deploy);
	// limiters of different names never do. It must pass
	// floodgate.CheckName.
	//
	// The default is derived from the limit: "inflight:" and the limit in
	// decimal, such as "inflight:20" (Limiter.Name returns it). So two
	// limiters built for different purposes with different limits keep
	// apart, and the processes of a fleet, built alike, share. Name a
	// limiter to keep apart limiters of equal limits (two endpoints, each
	// with its own 20 in flight per client), and to keep a key's holds
	// across a change of its limit: under the default name, processes
	// deployed with a new limit start with no holds under the new name,
	// so while a rolling deploy runs the old processes and the new admit
	// up to the old limit and the new one each, until the requests
	// admitted under the old name end.
	Name string

	// Observer receives every Acquire (OnAcquire: allowed, denied or
	// failed, with the key's limit and its requests in flight) with the
	// context given to Acquire, and every release of a slot Acquire took
	// (OnRelease: how long it was held, on the monotonic clock, and the
	// store's error) with the context given to Release: once per slot,
	// however many times it or its copies are released, and also for a
	// slot whose hold a renewal found expired. They run on the goroutine
	// of the call, under no lock of the Limiter's. The default (nil)
	// reports nothing; the Observer's other fields do not apply.
	//
	// Observing allocates nothing. With OnRelease set, an Acquire reads
	// the monotonic clock, and on a store whose holds do not expire
	// (LocalStore) takes a pooled record that tells a slot's first Release
	// from later ones, which Store.Release does not say.
	Observer *observe.Observer
}

// Status is the outcome of an Acquire.
type Status struct {
	// Allowed reports whether a slot was taken: the request may proceed,
	// and must release the slot when it ends.
	Allowed bool
	// Limit is the most requests of the key in flight at once.
	Limit int64
	// InFlight is the number of requests of the key holding a slot right
	// after the decision, this one included when Allowed. It may exceed
	// Limit when a limiter of the same name with a higher limit holds
	// slots of the key (a limit lowered during a rolling deploy).
	InFlight int64
	// RetryAfter is, for a denial, the hint of Options.RetryAfter; it is
	// never 0 on a denial, and 0 when Allowed.
	RetryAfter time.Duration
}

// Limiter caps the requests in flight per key, across every process that
// shares its Store. Create one with New and Close it when done; the zero
// value is not usable. A Limiter is safe for concurrent use.
type Limiter struct {
	store      Store
	limit      int64
	ttl        time.Duration
	retryAfter time.Duration
	closed     atomic.Bool
	renew      renewer

	name      string
	onAcquire func(context.Context, observe.Acquire) // nil: none
	onRelease func(context.Context, observe.Release) // nil: none
	// base is the origin of the slots' start times: time.Since of a Time
	// read with time.Now reads only the monotonic clock.
	base  time.Time
	onces sync.Pool // of *once, with onRelease only
}

// New returns a Limiter that lets at most limit requests of each key hold a
// slot of store at once, configured by opts (nil means the defaults). It
// returns an error matching floodgate.ErrInvalidConfig for a nil store, a
// limit below 1 or unusable options.
func New(store Store, limit int64, opts *Options) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: inflight: nil store", floodgate.ErrInvalidConfig)
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: inflight: limit must be at least 1, got %d", floodgate.ErrInvalidConfig, limit)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.TTL < 0 || o.RenewEvery < 0 || o.RetryAfter < 0:
		return nil, fmt.Errorf("%w: inflight: negative option in %+v", floodgate.ErrInvalidConfig, o)
	case o.TTL == 0:
		o.TTL = DefaultTTL
	case o.TTL < MinTTL:
		return nil, fmt.Errorf("%w: inflight: TTL %v is below MinTTL", floodgate.ErrInvalidConfig, o.TTL)
	}
	switch {
	case o.RenewEvery == 0:
		o.RenewEvery = o.TTL / 3
	case o.RenewEvery >= o.TTL:
		return nil, fmt.Errorf("%w: inflight: RenewEvery %v is not less than TTL %v", floodgate.ErrInvalidConfig, o.RenewEvery, o.TTL)
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if err := o.Observer.Validate(); err != nil {
		return nil, fmt.Errorf("inflight: Observer: %w", err)
	}
	if o.Name == "" {
		o.Name = defaultName(limit)
	}
	if err := floodgate.CheckName(o.Name); err != nil {
		return nil, fmt.Errorf("inflight: Name: %w", err)
	}
	l := &Limiter{store: store, limit: limit, ttl: o.TTL, retryAfter: o.RetryAfter, name: o.Name, base: time.Now()}
	if o.Observer != nil {
		l.onAcquire, l.onRelease = o.Observer.OnAcquire, o.Observer.OnRelease
	}
	l.renew.init(store, o.Name, o.TTL, o.RenewEvery)
	return l, nil
}

// defaultName is the name of a Limiter of limit without Options.Name.
func defaultName(limit int64) string {
	return "inflight:" + strconv.FormatInt(limit, 10)
}

// Limit returns the most requests of a key in flight at once.
func (l *Limiter) Limit() int64 { return l.limit }

// Name returns the Limiter's name: Options.Name, or the name derived from
// its limit (see Options.Name).
func (l *Limiter) Name() string { return l.name }

// Acquire takes a slot of key for a request, or denies it when Limit
// requests of key hold one. It never waits. The request releases the slot
// with Slot.Release when it ends, whatever way it ends (a defer):
//
//	slot, err := lim.Acquire(ctx, key)
//	if err != nil {
//		return err // a bad key, a failing store, an ended context
//	}
//	if !slot.Allowed {
//		return tooMany(slot.RetryAfter)
//	}
//	defer slot.Release(ctx)
//
// A denial is a Slot with Allowed false (its Release does nothing), not an
// error. Errors are those of Store.Acquire, ctx.Err() when ctx has ended,
// and an error matching floodgate.ErrClosed after Close.
//
// On a LocalStore, Acquire and Release allocate nothing for a key in use;
// on a store whose holds expire, a slot held longer than
// Options.RenewEvery is renewed by the Limiter until it is released.
func (l *Limiter) Acquire(ctx context.Context, key string) (s Slot, err error) {
	if l.onAcquire != nil {
		// A deferred report rather than a wrapper: a Slot returned through
		// two functions is copied twice, which costs more than the defer.
		defer func() { l.reportAcquire(ctx, key, &s, err) }()
	}
	if key == "" || len(key) > floodgate.MaxKeyLen {
		return Slot{}, floodgate.CheckKey(key)
	}
	if err := ctx.Err(); err != nil {
		return Slot{}, err
	}
	if l.closed.Load() {
		return Slot{}, errClosed
	}
	res, err := l.store.Acquire(ctx, l.name, key, l.limit, l.ttl)
	if err != nil {
		return Slot{}, err
	}
	s = Slot{Status: Status{Allowed: res.Allowed, Limit: l.limit, InFlight: res.InFlight}}
	if !res.Allowed {
		s.RetryAfter = l.retryAfter
		return s, nil
	}
	s.l, s.key, s.hold = l, key, res.Hold
	if res.Hold.Expires {
		s.reg, s.gen = l.renew.add(key, res.Hold)
	}
	if l.onRelease != nil {
		s.start = time.Since(l.base)
		if s.reg == nil {
			// No registration tells the first Release from later ones:
			// a pooled once does.
			s.once, _ = l.onces.Get().(*once)
			if s.once == nil {
				s.once = new(once)
			}
			s.gen = s.once.gen.Load()
		}
	}
	return s, nil
}

// reportAcquire tells OnAcquire of an Acquire that returned s and err.
func (l *Limiter) reportAcquire(ctx context.Context, key string, s *Slot, err error) {
	e := observe.Acquire{Name: l.name, Key: key, Outcome: observe.Allowed, Err: err, Limit: l.limit, InFlight: s.InFlight}
	switch {
	case err != nil:
		e.Outcome = observe.Failed
	case !s.Allowed:
		e.Outcome = observe.Denied
	}
	l.onAcquire(ctx, e)
}

// Close stops the renewals of the slots still held: they then expire
// within Options.TTL, unless their requests release them first (Release
// works after Close). Acquire fails with an error matching floodgate.ErrClosed after Close. Close waits
// for a renewal in progress, is safe to call more than once and always
// returns nil.
func (l *Limiter) Close() error {
	l.closed.Store(true)
	l.renew.close()
	return nil
}

// Slot is the outcome of an Acquire: a Status and, when Allowed, the
// slot the request holds until Release.
//
// Slot is a value, not a pointer, so that Acquire does not allocate. Its
// Release may be called on copies and from several goroutines at once: the
// first call of all releases the slot, and the others do nothing. The zero
// Slot, like a denial, holds nothing.
type Slot struct {
	Status

	l     *Limiter // nil unless Allowed
	key   string
	hold  Hold
	reg   *renewal      // the hold's renewal, or nil
	once  *once         // with OnRelease and no reg: tells the first Release
	gen   uint64        // reg's or once's generation when the slot was taken
	start time.Duration // with OnRelease: the acquisition, since l.base
}

// once tells the first Release of a slot (of any copy of its Slot) from
// later ones, for a Limiter with an OnRelease to report it to once, when
// no renewal registration does. It is pooled: its generation, which the
// first Release advances, tells a Slot's Release from that of a later
// Slot reusing it.
type once struct{ gen atomic.Uint64 }

// Release gives the slot back, once: later calls, on this Slot or a copy,
// do nothing and return nil. It completes whether or not ctx has ended (it
// keeps only ctx's values), since a request's context has often ended by
// the time it releases. An error is the store's: the slot then frees when
// its hold expires (within Options.TTL, as renewals stop at the first
// Release), or, on an in-process store, never fails.
func (s Slot) Release(ctx context.Context) error {
	if s.l == nil {
		return nil
	}
	switch {
	case s.reg != nil:
		held, ok := s.l.renew.remove(s.reg, s.gen)
		if !ok {
			return nil // released before
		}
		if !held {
			// Lost: a renewal found the hold gone, so there is nothing
			// left to free; the request that held it has ended all the
			// same.
			if s.l.onRelease != nil {
				s.reportRelease(ctx, nil)
			}
			return nil
		}
	case s.once != nil:
		if !s.once.gen.CompareAndSwap(s.gen, s.gen+1) {
			return nil // released before
		}
		s.l.onces.Put(s.once)
	}
	err := s.l.store.Release(ctx, s.l.name, s.key, s.hold)
	if s.l.onRelease != nil {
		s.reportRelease(ctx, err)
	}
	return err
}

// reportRelease tells OnRelease of the release of s.
func (s *Slot) reportRelease(ctx context.Context, err error) {
	s.l.onRelease(ctx, observe.Release{Name: s.l.name, Key: s.key, Held: time.Since(s.l.base) - s.start, Err: err})
}
