package redisstore

import "fmt"

// Observer is told of every decision Redis failed to make and of every
// change of the circuit breaker, so that users can count, log and alert on
// them (fail-open in particular) without floodgate depending on a metrics
// library.
//
// Observe is called synchronously on the goroutine of the decision (or of
// the breaker change), never while the Store holds a lock, possibly from
// many goroutines at once: it must be safe for concurrent use and return
// quickly.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventError reports a decision that failed and whose error Apply
	// returned to the caller: under FailError, or when the failure is not
	// one the policy absorbs (ErrReply, ErrMismatch, an invalid local
	// quota).
	EventError EventKind = iota + 1
	// EventFallback reports a decision that Redis failed to make and that
	// the failure policy made instead (FailOpen, FailClosed, FailLocal).
	EventFallback
	// EventBreaker reports a change of the circuit breaker's state.
	EventBreaker
)

// String returns "error", "fallback" or "breaker".
func (k EventKind) String() string {
	switch k {
	case EventError:
		return "error"
	case EventFallback:
		return "fallback"
	case EventBreaker:
		return "breaker"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one report to an Observer: a plain value, which the Observer
// may keep.
type Event struct {
	// Kind says what the event reports, and which fields are set.
	Kind EventKind
	// Key is the key given to Apply (EventError, EventFallback).
	Key string
	// Err is why the decision failed (EventError, EventFallback); it
	// matches floodgate.ErrUnavailable and one of this package's errors.
	Err error
	// Policy is the failure policy that made the decision (EventFallback).
	Policy FailurePolicy
	// Node is the address of the node whose breaker changed
	// (EventBreaker): a Cluster master's or a Ring shard's, the server's
	// for a Client, "" for a client of another kind.
	Node string
	// From and To are the breaker's states before and after the change
	// (EventBreaker).
	From, To BreakerState
}

// FailurePolicy says what a decision does when Redis cannot make it:
// Redis is unreachable, slow (Options.Timeout), or the circuit breaker is
// open.
type FailurePolicy uint8

const (
	// FailError returns the error (matching floodgate.ErrUnavailable) to the
	// caller, who decides. It is the default.
	FailError FailurePolicy = iota
	// FailOpen admits: Result.Allowed with Granted = n (for a take up to n,
	// at most the quota) and Remaining = Limit − Granted, as if the quota
	// were otherwise untouched; a refund gives nothing back. WARNING: while
	// Redis is down nothing is limited; observe EventFallback and alert.
	FailOpen
	// FailClosed denies: Result.Allowed false, Remaining 0 and RetryAfter
	// equal to Options.BreakerCooldown, when Redis is next probed. While
	// Redis is down everything is refused.
	FailClosed
	// FailLocal decides on an in-process floodgate memstore holding
	// Options.LocalShare of every quota (see Options.LocalShare), and
	// returns to Redis when the breaker's probe succeeds. The local state
	// starts full and is not merged back into Redis.
	FailLocal
)

// String returns "FailError", "FailOpen", "FailClosed" or "FailLocal".
func (p FailurePolicy) String() string {
	switch p {
	case FailError:
		return "FailError"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	case FailLocal:
		return "FailLocal"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}
