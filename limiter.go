package floodgate

import (
	"context"
	"errors"
	"fmt"
	"time"
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
	// quota); OpRefund gives back req.N units admitted for the instant
	// req.At. Result.At is the store's clock at the step, from which a
	// later refund names the instant of an admission (Result.At plus
	// Result.Delay). The layers built on a Limiter (package lease, the
	// HTTP middleware) use it; a wrapper around a Limiter forwards it.
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

// Kind names one of the five algorithms. Stores keep the state of a key
// separately per Kind.
type Kind uint8

// The algorithms floodgate implements.
const (
	KindTokenBucket Kind = iota + 1
	KindLeakyBucket
	KindFixedWindow
	KindSlidingWindow
	KindSlidingLog
)

// String returns the short name stores use in keys ("tb", "lb", "fw", "sw",
// "sl").
func (k Kind) String() string {
	switch k {
	case KindTokenBucket:
		return "tb"
	case KindLeakyBucket:
		return "lb"
	case KindFixedWindow:
		return "fw"
	case KindSlidingWindow:
		return "sw"
	case KindSlidingLog:
		return "sl"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Algorithm is a validated algorithm configuration: TokenBucket, LeakyBucket,
// FixedWindow, SlidingWindow or SlidingLog. Each holds the reference state
// transition (its Step method) that every Store must reproduce exactly.
type Algorithm interface {
	// Validate reports whether the configuration is usable; a non-nil error
	// matches ErrInvalidConfig.
	Validate() error
	// Policy reports the quota and the window, for headers.
	Policy() Policy
	// Kind names the algorithm.
	Kind() Kind
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
	// OpRefund gives back N units that were admitted for the instant At
	// (Result.At plus Result.Delay of the admission), where the algorithm
	// allows: token bucket, fixed window, sliding window and sliding log.
	// Units that already left the window, or already refilled, are not
	// given back twice. The leaky bucket refunds nothing: its departure
	// slots are already promised to later requests. Result.Granted says how
	// many units were given back.
	OpRefund
)

// Request is one step a Store executes atomically for one key.
type Request struct {
	Op Op
	// N is the number of units, at least 1.
	N int64
	// MaxDelay bounds Decision.Delay for OpTake; it is ignored otherwise.
	// Values above MaxDelay are treated as MaxDelay.
	MaxDelay time.Duration
	// At is, for OpRefund, the instant the units were admitted for.
	At time.Time
}

// Result is a Decision together with what a Store needs to report about the
// step itself.
type Result struct {
	Decision
	// Granted is the number of units the step admitted (for OpRefund: gave
	// back); 0 for a denial.
	Granted int64
	// At is the store's clock at the step.
	At time.Time
}

// Store executes admission steps. Implementations must be safe for
// concurrent use.
//
// Apply performs one step for (key, alg) atomically: no other step on the
// same key and algorithm Kind interleaves with it, and the outcome equals the
// algorithm's Step applied to the stored state at the store's current time.
// State is kept per key and Kind, so two limiters of the same Kind sharing a
// store must not share keys (prefix them).
//
// Apply returns an error only for bad arguments (the sentinels of this
// package), for a failure of the backend (wrapping ErrUnavailable and the
// cause) or for an ended context. A denial is not an error.
type Store interface {
	Apply(ctx context.Context, key string, alg Algorithm, req Request) (Result, error)
}

// Binder is an optional interface of a Store: Bind prepares the store for
// one algorithm configuration and returns what applies its steps, so that
// decisions skip finding the algorithm's state in the store. New binds the
// stores that implement it.
type Binder interface {
	Store
	// Bind validates alg and returns its bound steps; it returns an error
	// matching ErrInvalidConfig for an algorithm the store cannot run.
	Bind(alg Algorithm) (Bound, error)
}

// Bound applies steps of the algorithm it was bound to, as Store.Apply does
// for that algorithm. Implementations are safe for concurrent use.
type Bound interface {
	Apply(ctx context.Context, key string, req Request) (Result, error)
}

// unbound adapts a Store without Bind to Bound.
type unbound struct {
	store Store
	alg   Algorithm
}

func (u unbound) Apply(ctx context.Context, key string, req Request) (Result, error) {
	return u.store.Apply(ctx, key, u.alg, req)
}

// MaxKeyLen is the longest key a Limiter accepts, in bytes.
const MaxKeyLen = 1024

// MaxWindow is the longest window, and the longest time to restore a full
// quota, that an algorithm accepts: 2^52 ns, about 52 days. The bound keeps
// every time difference exact in Redis' Lua, whose numbers are doubles.
const MaxWindow = time.Duration(1 << 52)

// MaxDelay is the longest delay a Reserve or Wait can be admitted with:
// 2^52 ns, about 52 days. Larger maxDelay arguments are treated as MaxDelay.
const MaxDelay = time.Duration(1 << 52)

// Errors. They are matched with errors.Is; the errors returned wrap them with
// details.
var (
	// ErrInvalidConfig reports an unusable algorithm configuration.
	ErrInvalidConfig = errors.New("floodgate: invalid configuration")
	// ErrInvalidN reports a cost n below 1.
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

// CheckKey returns ErrEmptyKey or ErrKeyTooLong for a key no Limiter accepts.
// Stores call it on keys that reach them directly.
func CheckKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), MaxKeyLen)
	}
	return nil
}

// checkRequest validates the arguments common to every algorithm.
func checkRequest(req Request) error {
	if req.N < 1 {
		return fmt.Errorf("%w: got %d", ErrInvalidN, req.N)
	}
	if req.MaxDelay < 0 {
		return fmt.Errorf("%w: got %v", ErrInvalidDelay, req.MaxDelay)
	}
	return nil
}

// New returns a Limiter that runs alg on store. It validates alg and returns
// an error matching ErrInvalidConfig when alg is unusable.
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
	var bound Bound = unbound{store: store, alg: alg}
	if b, ok := store.(Binder); ok {
		if bound, err = b.Bind(alg); err != nil {
			return nil, err
		}
	}
	l := &limiter{store: bound, alg: alg, policy: alg.Policy()}
	l.taker, _ = bound.(taker)
	return l, nil
}

// taker is implemented by a Bound with a faster path than Apply for a plain
// take (OpTake without delay): memstore's token bucket and fixed window
// return the fields of the Decision that vary as scalars, which stay in
// registers, where a Result or a Decision (structs of more than four
// fields) is copied through memory at each call. Take must decide exactly as Apply would; the Decision
// has Limit the quota and Delay 0.
type taker interface {
	Take(ctx context.Context, key string, n int64) (allowed bool, remaining int64, retryAfter, resetAfter time.Duration, err error)
}

// derefAlgorithm returns alg as a value: a pointer to one of the five
// configurations also implements Algorithm (their methods have value
// receivers), and stores compare and switch on the values. A nil alg, or a
// nil pointer, whose methods would panic, is ErrInvalidConfig.
func derefAlgorithm(alg Algorithm) (Algorithm, error) {
	nilAlg := fmt.Errorf("%w: nil algorithm", ErrInvalidConfig)
	switch a := alg.(type) {
	case nil:
		return nil, nilAlg
	case *TokenBucket:
		if a == nil {
			return nil, nilAlg
		}
		return *a, nil
	case *LeakyBucket:
		if a == nil {
			return nil, nilAlg
		}
		return *a, nil
	case *FixedWindow:
		if a == nil {
			return nil, nilAlg
		}
		return *a, nil
	case *SlidingWindow:
		if a == nil {
			return nil, nilAlg
		}
		return *a, nil
	case *SlidingLog:
		if a == nil {
			return nil, nilAlg
		}
		return *a, nil
	}
	return alg, nil
}

// limiter is the Limiter returned by New: argument checks and the Wait loop
// over a Store.
type limiter struct {
	store  Bound
	taker  taker // store's fast path for Allow and AllowN, or nil
	alg    Algorithm
	policy Policy
}

var _ Limiter = (*limiter)(nil)

// Allow, AllowN and Reserve repeat take's body rather than call it: each
// layer copies the Result, and these are the hot path (measured with
// callgrind: about 90 instructions a decision).

func (l *limiter) Allow(ctx context.Context, key string) (Decision, error) {
	if key == "" || len(key) > MaxKeyLen {
		return Decision{}, l.badTake(key, 1, 0)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if l.taker != nil {
		// Written out rather than in a method: returning a Decision from one
		// costs a copy through memory (Go keeps structs of more than four
		// fields out of registers).
		ok, remaining, retry, reset, err := l.taker.Take(ctx, key, 1)
		if err != nil {
			return Decision{}, err
		}
		return Decision{Allowed: ok, Limit: l.policy.Quota, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}, nil
	}
	res, err := l.store.Apply(ctx, key, Request{Op: OpTake, N: 1})
	return res.Decision, err
}

func (l *limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if key == "" || len(key) > MaxKeyLen || n < 1 || n > l.policy.Quota {
		return Decision{}, l.badTake(key, n, 0)
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if l.taker != nil {
		// Written out rather than in a method: returning a Decision from one
		// costs a copy through memory (Go keeps structs of more than four
		// fields out of registers).
		ok, remaining, retry, reset, err := l.taker.Take(ctx, key, n)
		if err != nil {
			return Decision{}, err
		}
		return Decision{Allowed: ok, Limit: l.policy.Quota, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}, nil
	}
	res, err := l.store.Apply(ctx, key, Request{Op: OpTake, N: n})
	return res.Decision, err
}

func (l *limiter) Reserve(ctx context.Context, key string, n int64, maxDelay time.Duration) (Decision, error) {
	res, err := l.take(ctx, key, n, maxDelay)
	return res.Decision, err
}

func (l *limiter) take(ctx context.Context, key string, n int64, maxDelay time.Duration) (Result, error) {
	if key == "" || len(key) > MaxKeyLen || n < 1 || n > l.policy.Quota || maxDelay < 0 {
		return Result{}, l.badTake(key, n, maxDelay)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return l.store.Apply(ctx, key, Request{Op: OpTake, N: n, MaxDelay: min(maxDelay, MaxDelay)})
}

// badTake returns the error of take's arguments, off the hot path.
func (l *limiter) badTake(key string, n int64, maxDelay time.Duration) error {
	if err := CheckKey(key); err != nil {
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
	res, err := l.take(ctx, key, n, maxDelay)
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
	req := Request{Op: OpRefund, N: n, At: res.At.Add(res.Delay)}
	_, _ = l.store.Apply(context.WithoutCancel(ctx), key, req)
}

func (l *limiter) Policy() Policy { return l.policy }

func (l *limiter) Algorithm() Algorithm { return l.alg }

func (l *limiter) Apply(ctx context.Context, key string, req Request) (Result, error) {
	switch req.Op {
	case OpTake:
		return l.take(ctx, key, req.N, req.MaxDelay)
	case OpTakeUpTo, OpRefund:
		return l.step(ctx, key, req)
	}
	return Result{}, fmt.Errorf("%w: unknown Op %d", ErrInvalidConfig, req.Op)
}

// step checks the key, n and ctx, and applies req.
func (l *limiter) step(ctx context.Context, key string, req Request) (Result, error) {
	if err := CheckKey(key); err != nil {
		return Result{}, err
	}
	if req.N < 1 {
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
