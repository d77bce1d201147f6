package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter decides whether work identified by a key may proceed now, later,
// or not at all, by running one algorithm on a Store. It is safe for
// concurrent use. Create one with New. The zero value is not usable:
// Allow and AllowN panic on it, as methods of a nil pointer do (a check
// would cost them their inlining, and so a call on every decision), and
// the other methods return an error matching ErrInvalidConfig.
//
// Being limited is a result (Decision.Allowed == false), never an error.
// Errors mean bad arguments (ErrInvalidN, ErrExceedsLimit, ErrEmptyKey,
// ErrKeyTooLong, ErrInvalidDelay), a failing store (ErrUnavailable) or an
// ended context.
//
// A Limiter keeps no state of its own: its keys' state lives in its store
// under its Name, so Limiters built with the same store, name and
// algorithm, in one process or in many sharing a Redis, decide as one.
type Limiter struct {
	b      Bound
	quota  int64 // policy.Quota: the most units one take may ask for
	policy Policy
	alg    Algorithm
	name   string
}

// Options configures a Limiter. A nil *Options means the defaults.
type Options struct {
	// Name identifies the limiter's state in its store: a key's state is
	// (Name, key, algorithm kind), and for the limits of a Limits, also
	// the limit's ordinal among the limits of its kind (see Store). It is
	// also the name observers and the metrics adapters report the
	// limiter's decisions under. It must pass CheckName.
	//
	// The default is derived from the configuration, such as
	// "tb:10/1s:b10" for TokenBucket{Rate: 10, Per: time.Second, Burst:
	// 10} (see Limiter.Name): two limiters with different configurations
	// never share state, and two with the same one do, in one process or
	// across processes sharing a store. Name limiters to keep two of one
	// configuration apart (a search limit and an upload limit that happen
	// to be equal), or to keep a key's state across a change of
	// configuration: under a derived name a rolling deploy that raises a
	// limit starts every key afresh under the new name (a full quota,
	// once), while under an explicit name the new configuration continues
	// from what the old one counted (see each algorithm's doc for how a
	// state reads under a new configuration of its kind).
	Name string
}

// Decision is the outcome of one admission step.
//
// The durations are relative to the store's clock at the decision: a
// distributed store reports them from the server's time, so they can be
// forwarded to clients without clock skew.
type Decision struct {
	// Allowed reports whether the units were admitted. The caller proceeds
	// after Delay.
	Allowed bool
	// Limit is the quota: the burst of a token bucket, the capacity of a
	// leaky bucket, the count per window of the window algorithms.
	Limit int64
	// Remaining is how many units could still be admitted right after this
	// decision without waiting (for the leaky bucket: the free queue
	// capacity). It is never negative.
	Remaining int64
	// Delay is how long the caller waits before proceeding: 0 for an
	// immediate admission, positive for shaping and reservations.
	Delay time.Duration
	// RetryAfter is, for a denial, how long until the same request would be
	// admitted if nothing else happened; it is never 0 on a denial. It is 0
	// when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the quota is fully restored.
	ResetAfter time.Duration
	// Binding is, for a Limits composite, the index of the limit whose
	// Limit, Remaining, RetryAfter and ResetAfter the Decision reports:
	// on a denial, the denying limit with the longest RetryAfter; on an
	// admission, the one with the fewest units left (then the longest
	// ResetAfter, then the first). It is 0 for a single algorithm.
	Binding int
}

// Policy describes a limiter's quota for rate-limit headers: Quota units are
// restored in full within Window.
type Policy struct {
	// Quota is the number of units (equal to Decision.Limit).
	Quota int64
	// Window is the time in which a spent quota is fully restored: the window
	// of the window algorithms, Burst/Rate·Per for the token bucket and
	// Capacity/Rate·Per for the leaky bucket. A CalendarWindow's is its
	// unit's longest length without clock shifts (31 days for a month),
	// which may exceed MaxWindow.
	Window time.Duration
}

// Algorithm is an algorithm configuration: TokenBucket, LeakyBucket,
// FixedWindow (or its calendar form, CalendarWindow), SlidingWindow,
// SlidingLog, or a Limits of them, and no
// other type (the interface has an unexported method), because every
// store implements exactly these. A pointer to one of them is accepted by
// New as the value it points to.
type Algorithm interface {
	// Validate reports whether the configuration is usable; a non-nil error
	// matches ErrInvalidConfig.
	Validate() error
	// Policy reports the quota and the window, for headers.
	Policy() Policy
	// algorithm closes the interface to the five configurations.
	algorithm()
}

// Errors. They are matched with errors.Is; the errors returned wrap them with
// details.
var (
	// ErrInvalidConfig reports an unusable algorithm configuration.
	ErrInvalidConfig = errors.New("floodgate: invalid configuration")
	// ErrInvalidN reports a cost n below 1 (for OpSettle, a cost of 0).
	ErrInvalidN = errors.New("floodgate: n must be at least 1")
	// ErrExceedsLimit reports a cost n larger than the quota can ever admit:
	// such a request would be denied forever.
	ErrExceedsLimit = errors.New("floodgate: n exceeds the limit")
	// ErrInvalidDelay reports a negative maximum delay.
	ErrInvalidDelay = errors.New("floodgate: maxDelay must not be negative")
	// ErrEmptyKey reports an empty key.
	ErrEmptyKey = errors.New("floodgate: empty key")
	// ErrKeyTooLong reports a key longer than MaxKeyLen bytes.
	ErrKeyTooLong = errors.New("floodgate: key too long")
	// ErrUnavailable reports a store that failed to decide; the error
	// returned wraps the cause as well.
	ErrUnavailable = errors.New("floodgate: store unavailable")
	// ErrClosed reports a step on a store that was closed; the error
	// returned matches ErrUnavailable too.
	ErrClosed = errors.New("floodgate: store closed")
	// ErrWaitExceedsDeadline reports a Wait that cannot be admitted in time:
	// its needed delay is longer than the time left before its context's
	// deadline (then the error also matches context.DeadlineExceeded), or,
	// without a deadline, longer than MaxDelay or beyond what the algorithm
	// can queue (a full leaky bucket).
	ErrWaitExceedsDeadline = errors.New("floodgate: wait would exceed the context deadline")
)

// New returns a Limiter that runs alg on store under the name of opts (nil
// means the defaults; see Options). It validates alg and the name, binds
// alg to store, and returns an error matching ErrInvalidConfig when
// either is unusable or store cannot run alg.
func New(store Store, alg Algorithm, opts *Options) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	alg, err := derefAlgorithm(alg)
	if err != nil {
		return nil, err
	}
	if err := alg.Validate(); err != nil {
		return nil, err
	}
	name := nameOf(alg)
	if opts != nil && opts.Name != "" {
		name = opts.Name
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	bound, err := store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	if bound == nil {
		return nil, fmt.Errorf("%w: %T bound %v to nothing", ErrInvalidConfig, store, alg)
	}
	p := alg.Policy()
	return &Limiter{b: bound, quota: p.Quota, policy: p, alg: alg, name: name}, nil
}

// derefAlgorithm returns alg as a value: a pointer to one of the five
// configurations also implements Algorithm (their methods have value
// receivers), and stores compare and switch on the values. It is the one
// place that handles pointers: stores are bound to values only. A nil alg, or a
// nil pointer, whose methods would panic, is ErrInvalidConfig.
func derefAlgorithm(alg Algorithm) (Algorithm, error) {
	isNil := false
	switch a := alg.(type) {
	case nil:
		isNil = true
	case *TokenBucket:
		if isNil = a == nil; !isNil {
			return *a, nil
		}
	case *LeakyBucket:
		if isNil = a == nil; !isNil {
			return *a, nil
		}
	case *FixedWindow:
		if isNil = a == nil; !isNil {
			return *a, nil
		}
	case *CalendarWindow:
		if isNil = a == nil; !isNil {
			return *a, nil
		}
	case *SlidingWindow:
		if isNil = a == nil; !isNil {
			return *a, nil
		}
	case *SlidingLog:
		if isNil = a == nil; !isNil {
			return *a, nil
		}
	case *Limits:
		if isNil = a == nil; !isNil {
			return derefLimits(*a)
		}
	case Limits:
		return derefLimits(a)
	}
	if isNil {
		return nil, fmt.Errorf("%w: nil algorithm", ErrInvalidConfig)
	}
	return alg, nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.b.Take(ctx, key, 1)
}

// AllowN admits n units now or denies them; it never waits, and a denial
// changes no state.
//
// Allow and AllowN are the hot path, and inline into their callers: they
// hand the step to the store's Bound, which checks the arguments as every
// step's are checked (CheckKey, CheckRequest; the errors of a bad key or
// n come from there) and treats ctx as its backend needs. A store that
// does I/O (redisstore) returns ctx's error when ctx has ended; an
// in-process one (memstore, a lease's pool) decides without looking at
// ctx, as golang.org/x/time/rate's Allow does. Reserve, Wait and Apply
// return ctx's error before asking the store.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	return l.b.Take(ctx, key, n)
}

// errNotMade is the error of every call of a Limiter New did not make.
var errNotMade = fmt.Errorf("%w: a Limiter not made by New", ErrInvalidConfig)

// Reserve admits n units to proceed after Decision.Delay, which is at most
// maxDelay (MaxDelay when larger); Reserve(ctx, key, n, 0) is AllowN. The
// caller must wait Delay before proceeding.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (Decision, error) {
	res, err := l.Apply(ctx, key, Request{Op: OpTake, N: n, MaxDelay: maxDelay}, nil)
	return res.Decision, err
}

// badTake returns the error of a step's arguments, or nil.
func (l *Limiter) badTake(key string, req Request) error {
	if l.b == nil {
		return errNotMade
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckRequest(req, l.quota)
}

// Wait reserves n units with the time left before ctx's deadline as the
// maximum delay (MaxDelay without a deadline) and sleeps until they may
// proceed. It returns at once with an error matching
// ErrWaitExceedsDeadline (and context.DeadlineExceeded, when ctx has a
// deadline) when they cannot be admitted within that delay, and ctx.Err()
// when ctx ends during the sleep, after giving the units back where the
// algorithm allows (OpSettle).
func (l *Limiter) Wait(ctx context.Context, key string, n int64) error {
	maxDelay := MaxDelay
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		maxDelay = max(time.Until(deadline), 0)
	}
	res, err := l.Apply(ctx, key, Request{Op: OpTake, N: n, MaxDelay: maxDelay}, nil)
	if err != nil {
		return err
	}
	if !res.Allowed {
		return &waitError{n: n, retryAfter: res.RetryAfter, deadline: hasDeadline}
	}
	if res.Delay <= 0 {
		return nil
	}
	timer := time.NewTimer(res.Delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		l.refund(ctx, key, n, res)
		return ctx.Err()
	}
}

// refund gives back the n units of res, an admission with a delay whose
// caller gave up before it, so that the capacity it will not use serves
// others. It runs on a context that outlives ctx but keeps its values; a
// failed refund only leaves the units spent.
func (l *Limiter) refund(ctx context.Context, key string, n int64, res Result) {
	req := Request{Op: OpSettle, N: -n, At: res.At.Add(res.Delay)}
	_, _ = l.b.Apply(context.WithoutCancel(ctx), key, req, nil)
}

// Apply performs one step of any Op on key and reports what it did, for
// the few callers that need more than Allow, Reserve and Wait (the
// middleware of package httplimit settles costs known after the work):
// OpTake is Reserve(ctx, key, req.N, req.MaxDelay); OpTakeUpTo admits as
// many of req.N units as are available now (req.N may exceed the quota);
// OpSettle charges req.N more units (or, negative, gives -req.N back) for
// work admitted for the instant req.At. With req.Check, Apply reports
// what the step would do and changes nothing. Result.At is the store's
// clock at the step, from which a later settlement names the instant of
// an admission (Result.At plus Result.Delay).
//
// For a Limits, each receives each limit's own Decision, in the order of
// the Limits, when it has room for all of them; see Bound.Apply.
func (l *Limiter) Apply(ctx context.Context, key string, req Request, each []Decision) (Result, error) {
	if err := l.badTake(key, req); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	req.MaxDelay = min(req.MaxDelay, MaxDelay)
	return l.b.Apply(ctx, key, req, each)
}

// Policy reports the quota and the window of the limiter, for headers.
func (l *Limiter) Policy() Policy { return l.policy }

// Algorithm returns the algorithm configuration the limiter runs.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

// Name returns the limiter's name: Options.Name, or the one derived from
// its configuration: "tb:<Rate>/<Per>:b<Burst>", "lb:<Rate>/<Per>:c<Capacity>",
// "fw:<Limit>/<Window>", "sw:<Limit>/<Window>", "sl:<Limit>/<Window>", and
// for a Limits its limits' names joined by "+", with durations as
// time.Duration.String writes them ("tb:10/1s:b10+sw:1000/24h0m0s").
func (l *Limiter) Name() string { return l.name }

// waitError is returned by Wait when it cannot be admitted in time. It
// matches ErrWaitExceedsDeadline, and context.DeadlineExceeded when the
// context has a deadline.
type waitError struct {
	n          int64
	retryAfter time.Duration
	deadline   bool // the context has a deadline
}

func (e *waitError) Error() string {
	if !e.deadline {
		return fmt.Sprintf("floodgate: Wait(n=%d) cannot be admitted by waiting (retry after %v)", e.n, e.retryAfter)
	}
	return fmt.Sprintf("floodgate: Wait(n=%d) would exceed the context deadline (retry after %v)", e.n, e.retryAfter)
}

func (e *waitError) Is(target error) bool {
	return target == ErrWaitExceedsDeadline || (e.deadline && target == context.DeadlineExceeded)
}
