package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/internal/timemath"
)

// Limiter decides whether work identified by a key may proceed now, later, or
// not at all. Implementations are safe for concurrent use.
//
// Being limited is a result (Decision.Allowed == false), never an error.
// Errors mean bad arguments (ErrInvalidN, ErrExceedsLimit, ErrEmptyKey,
// ErrKeyTooLong, ErrInvalidDelay), a failing store (ErrUnavailable) or an
// ended context.
type Limiter interface {
	// Allow is shorthand for AllowN(ctx, key, 1).
	Allow(ctx context.Context, key string) (Decision, error)
	// AllowN admits n units now or denies them; it never waits and a denial
	// changes no state.
	AllowN(ctx context.Context, key string, n int64) (Decision, error)
	// Reserve admits n units to proceed after Decision.Delay, which is at
	// most maxDelay; Reserve(ctx, key, n, 0) is AllowN. The caller must wait
	// Delay before proceeding.
	Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (Decision, error)
	// Wait reserves n units with the time left before ctx's deadline as the
	// maximum delay (MaxDelay without a deadline) and sleeps until they may
	// proceed. It returns at once with an error matching
	// ErrWaitExceedsDeadline (and context.DeadlineExceeded, when ctx has a
	// deadline) when they cannot be admitted within that delay, and
	// ctx.Err() when ctx ends during the sleep, after giving the units back
	// where the algorithm allows.
	Wait(ctx context.Context, key string, n int64) error
	// Policy reports the quota and the window of the limiter, for headers.
	Policy() Policy
	// Algorithm returns the algorithm configuration the limiter runs.
	Algorithm() Algorithm
	// Apply performs one step of any Op on key and reports what it did:
	// OpTake is Reserve(ctx, key, req.N, req.MaxDelay); OpTakeUpTo admits
	// as many of req.N units as are available now (req.N may exceed the
	// quota); OpSettle charges req.N more units (or, negative, gives
	// -req.N back) for work admitted for the instant req.At. With
	// req.Check, Apply reports what the step would do and changes
	// nothing. Result.At is the store's clock at the step, from which a
	// later settlement names the instant of an admission (Result.At plus
	// Result.Delay). The layers built on a Limiter (packages lease and
	// httplimit) use it; a wrapper around a Limiter forwards it.
	Apply(ctx context.Context, key string, req Request) (Result, error)
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
	// Capacity/Rate·Per for the leaky bucket.
	Window time.Duration
}

// Algorithm is an algorithm configuration: TokenBucket, LeakyBucket,
// FixedWindow, SlidingWindow, SlidingLog, or a Limits of them, and no
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

// Op is the kind of step a Request asks a Store for.
type Op uint8

const (
	// OpTake admits all N units with a delay of at most MaxDelay, or none.
	OpTake Op = iota
	// OpTakeUpTo admits as many of the N units as are available now, without
	// delay; Result.Granted says how many (0 is a denial). The lease layer
	// uses it.
	OpTakeUpTo
	// OpSettle settles the cost of work admitted for the instant At
	// (Result.At plus Result.Delay of the admission) once it is known:
	// N > 0 charges N more units, N < 0 gives -N units back.
	//
	// A charge is counted whether or not the quota has room (the work is
	// done), into debt of at most one more quota: the token bucket's
	// schedule runs at most 2·Burst emission intervals ahead (later
	// requests wait until the debt is repaid), the leaky bucket's queue at
	// most 2·Capacity units, and the window algorithms count it in the
	// window of At, up to 2·Limit units there; a window that has ended
	// takes nothing. Units beyond the bound are not charged.
	//
	// A give-back happens where the algorithm allows: token bucket, fixed
	// window, sliding window and sliding log. Units that already left the
	// window, or already refilled, are not given back twice. The leaky
	// bucket gives nothing back: its departure slots are already promised
	// to later requests.
	//
	// Result.Granted says how many units were charged or given back.
	OpSettle
)

// Request is one step a Store executes atomically for one key.
type Request struct {
	Op Op
	// Check asks for the Result the step would have without changing any
	// state: a check-only call (Envoy's hits_addend 0). Stores honour it
	// for every Op.
	Check bool
	// N is the number of units, at least 1; for OpSettle, the units to
	// charge (positive) or give back (negative), not 0.
	N int64
	// MaxDelay bounds Decision.Delay for OpTake; it is ignored otherwise.
	// Values above MaxDelay are treated as MaxDelay.
	MaxDelay time.Duration
	// At is, for OpSettle, the instant the units were admitted for.
	At time.Time
	// Each, for a Limits composite, receives each limit's own Decision,
	// in the order of the Limits, when it has room for all of them
	// (len(Each) >= len(Limits)); it is ignored otherwise and for a
	// single algorithm. It lets a caller report every limit (the
	// RateLimit fields list them all) without an allocation per step.
	Each []Decision
}

// Result is a Decision together with what a Store needs to report about the
// step itself.
type Result struct {
	Decision
	// Granted is the number of units the step admitted (for OpSettle:
	// charged or gave back); 0 for a denial.
	Granted int64
	// At is the store's clock at the step.
	At time.Time
}

// Store keeps the state of keys and executes the steps of algorithms on
// it; memstore and redisstore are Stores, and package step holds what an
// author of another one needs. Implementations are safe for concurrent use.
//
// A key's state belongs to the key and the algorithm's kind (token bucket,
// leaky bucket, fixed window, sliding window, sliding log), never to one
// configuration: every configuration of a kind bound to a store reads and
// writes the same state for a key. A changed configuration (a rolling
// deploy that raises a limit) therefore continues from what the old one
// counted, and two limiters of one kind sharing a store must not share
// keys (prefix them). The limits of a Limits composite keep theirs apart
// from single algorithms, under (key, kind, ordinal); see Limits. The
// package floodgatetest checks a Store against this contract.
type Store interface {
	// Bind prepares the store for alg and returns what applies its steps.
	// New calls it once per Limiter with one of the five configurations,
	// or a Limits of them, as a value, validated. It returns an error matching ErrInvalidConfig
	// for an algorithm the store cannot run.
	Bind(alg Algorithm) (Bound, error)
}

// Bound applies the steps of the algorithm a Store bound it to.
// Implementations are safe for concurrent use.
type Bound interface {
	// Apply performs one step for key atomically: no other step on the
	// same key and algorithm kind interleaves with it, and the Result
	// equals the algorithm's reference transition (package step) applied
	// to the stored state at the store's current time.
	//
	// Apply returns an error only for bad arguments (the sentinels of this
	// package), for a failure of the backend (wrapping ErrUnavailable and
	// the cause) or for an ended context. A denial is not an error.
	Apply(ctx context.Context, key string, req Request) (Result, error)
	// Take is Apply of Request{Op: OpTake, N: n}, reporting the Decision
	// only: the step of Allow and AllowN, which a store may make cheaper
	// than Apply (memstore skips building the Result). It must decide
	// exactly as Apply would.
	Take(ctx context.Context, key string, n int64) (Decision, error)
}

// MaxKeyLen is the longest key a Limiter accepts, in bytes.
const MaxKeyLen = 1024

// MaxWindow is the longest window, and the longest time to restore a full
// quota, that an algorithm accepts: 2^52 ns, about 52 days. The bound keeps
// every time difference exact in Redis' Lua, whose numbers are doubles.
const MaxWindow = time.Duration(timemath.MaxWindow)

// MaxDelay is the longest delay a Reserve or Wait can be admitted with:
// 2^52 ns, about 52 days. Larger maxDelay arguments are treated as MaxDelay.
const MaxDelay = time.Duration(1 << 52)

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
	// ErrWaitExceedsDeadline reports a Wait that cannot be admitted in time:
	// its needed delay is longer than the time left before its context's
	// deadline (then the error also matches context.DeadlineExceeded), or,
	// without a deadline, longer than MaxDelay or beyond what the algorithm
	// can queue (a full leaky bucket).
	ErrWaitExceedsDeadline = errors.New("floodgate: wait would exceed the context deadline")
)

// checkKey returns ErrEmptyKey or ErrKeyTooLong for a key no Limiter
// accepts (step.CheckKey is the same check for stores).
func checkKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), MaxKeyLen)
	}
	return nil
}

// New returns a Limiter that runs alg on store. It validates alg and returns
// an error matching ErrInvalidConfig when alg is unusable or store cannot
// run it.
func New(store Store, alg Algorithm) (Limiter, error) {
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
	bound, err := store.Bind(alg)
	if err != nil {
		return nil, err
	}
	if bound == nil {
		return nil, fmt.Errorf("%w: %T bound %v to nothing", ErrInvalidConfig, store, alg)
	}
	return &limiter{store: bound, alg: alg, policy: alg.Policy()}, nil
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

// limiter is the Limiter returned by New: argument checks and the Wait loop
// over a Store.
type limiter struct {
	store  Bound
	alg    Algorithm
	policy Policy
}

var _ Limiter = (*limiter)(nil)

// Allow and AllowN repeat take's checks rather than call it: each layer
// copies the Result, and these are the hot path.

func (l *limiter) Allow(ctx context.Context, key string) (Decision, error) {
	if key == "" || len(key) > MaxKeyLen {
		return Decision{}, l.badTake(key, 1, 0)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, key, 1)
}

func (l *limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if key == "" || len(key) > MaxKeyLen || n < 1 || n > l.policy.Quota {
		return Decision{}, l.badTake(key, n, 0)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, key, n)
}

func (l *limiter) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (Decision, error) {
	res, err := l.take(ctx, key, Request{Op: OpTake, N: n, MaxDelay: maxDelay})
	return res.Decision, err
}

// take checks and applies req, an OpTake.
func (l *limiter) take(ctx context.Context, key string, req Request) (Result, error) {
	if key == "" || len(key) > MaxKeyLen || req.N < 1 || req.N > l.policy.Quota || req.MaxDelay < 0 {
		return Result{}, l.badTake(key, req.N, req.MaxDelay)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	req.MaxDelay = min(req.MaxDelay, MaxDelay)
	return l.store.Apply(ctx, key, req)
}

// badTake returns the error of take's arguments, off the hot path.
func (l *limiter) badTake(key string, n int64, maxDelay time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	switch {
	case n < 1:
		return fmt.Errorf("%w: got %d", ErrInvalidN, n)
	case n > l.policy.Quota:
		return fmt.Errorf("%w: n=%d, limit %d", ErrExceedsLimit, n, l.policy.Quota)
	default:
		return fmt.Errorf("%w: got %v", ErrInvalidDelay, maxDelay)
	}
}

func (l *limiter) Wait(ctx context.Context, key string, n int64) error {
	maxDelay := MaxDelay
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		maxDelay = max(time.Until(deadline), 0)
	}
	res, err := l.take(ctx, key, Request{Op: OpTake, N: n, MaxDelay: maxDelay})
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
func (l *limiter) refund(ctx context.Context, key string, n int64, res Result) {
	req := Request{Op: OpSettle, N: -n, At: res.At.Add(res.Delay)}
	_, _ = l.store.Apply(context.WithoutCancel(ctx), key, req)
}

func (l *limiter) Policy() Policy { return l.policy }

func (l *limiter) Algorithm() Algorithm { return l.alg }

func (l *limiter) Apply(ctx context.Context, key string, req Request) (Result, error) {
	switch req.Op {
	case OpTake:
		return l.take(ctx, key, req)
	case OpTakeUpTo, OpSettle:
		return l.step(ctx, key, req)
	}
	return Result{}, fmt.Errorf("%w: unknown Op %d", ErrInvalidConfig, req.Op)
}

// step checks the key, n and ctx, and applies req.
func (l *limiter) step(ctx context.Context, key string, req Request) (Result, error) {
	if err := checkKey(key); err != nil {
		return Result{}, err
	}
	if req.N < 1 && (req.Op != OpSettle || req.N == 0) {
		return Result{}, fmt.Errorf("%w: got %d", ErrInvalidN, req.N)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return l.store.Apply(ctx, key, req)
}

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
