package floodgate

import (
	"context"
	"strconv"
	"time"
)

// Store keeps the state of keys and executes the steps of algorithms on
// it: the one interface of floodgate's back end, as slog.Handler is
// slog's. memstore and redisstore are Stores, and so are the wrappers
// that take a Store and return one (observe.Store, lease.New), so that
// they compose: floodgate.New(observe.Store(lease.New(redis, …), …), alg,
// opts). Package step holds what the author of another store needs, and
// package floodgatetest checks a Store against this contract.
// Implementations are safe for concurrent use.
//
// # State identity
//
// A step's state is identified by (name, key, kind), and, for the limits
// of a Limits, (name, key, kind, ordinal): the name of the binding (the
// Limiter's Name), the key of the step, the algorithm's kind (token
// bucket, leaky bucket, fixed window, sliding window, sliding log) and
// the limit's ordinal among the limits of its kind in the Limits. Two
// bindings share state exactly when these agree: two limiters built
// under different names never see each other's counts, a configuration
// changed under one name (a rolling deploy that raises a limit) continues
// from what the old one counted, and a Limits keeps its limits' state
// apart from a single algorithm's under the same name.
//
// # Tiers
//
// An exact store decides every step exactly as the reference transition
// of package step does, applied to the stored state at the store's clock
// (memstore and redisstore; floodgatetest.Run checks equality). A
// conservative store, typically a wrapper that decides some steps without
// its inner store (lease), may deny what the reference would admit, but
// it never admits what the reference, given the same admissions, would
// deny: over any interval and under any concurrency it admits no more
// than the quota allows, and it states in its documentation how far it
// may under-admit. floodgatetest.Run checks that tier with
// Options.Conservative. A conservative store may refuse, at Bind, an
// algorithm it cannot keep conservative (with ErrInvalidConfig).
type Store interface {
	// Bind prepares the store for the algorithm alg under the name name,
	// and returns what applies its steps. New calls it once per Limiter,
	// with a name that passed CheckName and one of the five
	// configurations, or a Limits of them, as a value, validated. Binding
	// one name and algorithm twice gives Bounds that decide on the same
	// state. It returns an error matching ErrInvalidConfig for an
	// algorithm the store cannot run.
	Bind(name string, alg Algorithm) (Bound, error)
}

// Bound applies the steps of the algorithm a Store bound it to.
// Implementations are safe for concurrent use.
type Bound interface {
	// Apply performs one step for key atomically: no other step on the
	// same state interleaves with it, and an exact store's Result equals
	// the algorithm's reference transition (package step) applied to the
	// stored state at the store's current time.
	//
	// For a Limits, each limit's own Decision is written to each, in the
	// order of the Limits, when len(each) is at least the number of
	// limits; each is left as it is otherwise, and for a single
	// algorithm. A wrapper passes each on, or fills it.
	//
	// Apply returns an error only for bad arguments (the errors of
	// CheckKey and CheckRequest), for a failure of the backend (wrapping
	// ErrUnavailable and the cause), for a closed store (wrapping
	// ErrUnavailable and ErrClosed) or for an ended context. A denial is
	// not an error.
	Apply(ctx context.Context, key string, req Request, each []Decision) (Result, error)

	// Take is Apply of Request{Op: OpTake, N: n} reporting the Decision
	// only: the step of Allow and AllowN, which a store may make cheaper
	// than Apply (memstore skips building the Result). It must decide
	// exactly as Apply would.
	Take(ctx context.Context, key string, n int64) (Decision, error)
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

// String returns the Op's name: "take", "take_up_to" or "settle".
func (op Op) String() string {
	switch op {
	case OpTake:
		return "take"
	case OpTakeUpTo:
		return "take_up_to"
	case OpSettle:
		return "settle"
	}
	return "Op(" + strconv.Itoa(int(op)) + ")"
}

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
	// UndoLate asks the Store to give back the units of a take that
	// failed for its caller (a timeout) and yet was made, once the Store
	// learns of it: a caller that treats the failure as a denial, or
	// that asks elsewhere (a shard.Store asks another shard), then
	// spends no units on it. A Store that cannot learn of such steps
	// ignores it (memstore's steps never fail that way; redisstore
	// learns of the batched ones, see its package doc), and so do checks
	// and OpSettle. Units are given back as by OpSettle, so the leaky
	// bucket's are not.
	UndoLate bool
}

// Result is a Decision together with what a Store reports about the step
// itself.
type Result struct {
	Decision
	// Granted is the number of units the step admitted (for OpSettle:
	// charged or gave back); 0 for a denial.
	Granted int64
	// At is the store's clock at the step.
	At time.Time
}
