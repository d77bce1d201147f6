package redisstore

import "fmt"

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
	// Redis is down nothing is limited; count Options.Observer's
	// OnFailures (Policy "open") and alert.
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

// label returns the Policy of the Failures the policy made: "error",
// "open", "closed" or "local".
func (p FailurePolicy) label() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return "error"
}
