package observe

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Outcome says how a decision or an acquisition ended.
type Outcome uint8

const (
	// Allowed: the units were admitted (for a check, would be).
	Allowed Outcome = iota + 1
	// Denied: the limit refused them; a result, not an error.
	Denied
	// Failed: no decision was made; the caller got an error.
	Failed
)

// String returns "allowed", "denied" or "error": the values of the
// outcome label of the metrics adapters.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case Failed:
		return "error"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// DecisionEvent reports one step of a limiter on a store of Store: a take
// (Allow, AllowN, Reserve, Wait), a take up to n units, a settlement or a
// check (Apply).
type DecisionEvent struct {
	// Name is the limiter's name (floodgate.Limiter.Name).
	Name string
	// Key is the key decided on. It identifies a user: log it if you
	// must, but never make it a metric label (one series per user).
	Key string
	// Op is the step: OpTake for Allow, AllowN, Reserve and Wait.
	Op floodgate.Op
	// Check is set for a check-only step (Request.Check), which changed
	// nothing.
	Check bool
	// N is the number of units asked for; for OpSettle, charged (positive)
	// or given back (negative).
	N int64
	// Outcome says whether the units were admitted, denied, or the call
	// failed (Err).
	Outcome Outcome
	// Decision is what the store answered (zero when Outcome is Failed).
	// For a floodgate.Limits, Decision.Binding is the index of the limit
	// that bound, and Limits its number of limits.
	Decision floodgate.Decision
	// Limits is the number of limits of a floodgate.Limits composite, 0
	// for a single algorithm.
	Limits int
	// Err is the error the step returned (Outcome Failed).
	Err error
	// Latency is the time the step took on the monotonic clock, when it
	// was timed (one in Observer.LatencyEvery); 0 when it was not. A
	// Wait's step is its reservation, not its sleep.
	Latency time.Duration
}

// CallOutcome says how a store's round trip ended.
type CallOutcome uint8

const (
	// CallOK: the server answered (a script's error reply included: the
	// server was there).
	CallOK CallOutcome = iota + 1
	// CallTimeout: no answer within the store's timeout.
	CallTimeout
	// CallError: the connection failed or the call was refused.
	CallError
)

// String returns "ok", "timeout" or "error".
func (o CallOutcome) String() string {
	switch o {
	case CallOK:
		return "ok"
	case CallTimeout:
		return "timeout"
	case CallError:
		return "error"
	}
	return fmt.Sprintf("CallOutcome(%d)", uint8(o))
}

// StoreCall reports one round trip of a remote store to one node.
type StoreCall struct {
	// Name is the store's name (redisstore.Options.Name).
	Name string
	// Node is the address of the node called: a Cluster master's, a Ring
	// shard's, the server's; "" when the client does not say.
	Node string
	// Decisions is the number of decisions the call carried: 1, or more
	// in a batching store's pipeline; 0 for a call that carries none (an
	// exchange of a redisstore.FleetSource).
	Decisions int
	// Outcome says how the call ended, and Err why it failed.
	Outcome CallOutcome
	Err     error
	// Latency is the time from sending to the answer, or to the failure.
	Latency time.Duration
}

// Failures reports, counted over an interval (Observer.FailureInterval),
// the decisions a store could not make on one node and what its failure
// policy did with them.
type Failures struct {
	// Name is the store's name, and Node the node's address.
	Name, Node string
	// Policy is what the failure policy did: "open" (admitted),
	// "closed" (denied), "local" (decided in process) or "error" (the
	// caller got the error).
	Policy string
	// Count is the number of failed decisions in the interval, at least 1.
	Count int64
	// Err is the first failure of the interval: it matches
	// floodgate.ErrUnavailable and says why (a timeout, an open breaker).
	Err error
}

// BreakerState is the state of a circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed: calls go to the node.
	BreakerClosed BreakerState = iota
	// BreakerOpen: no call goes to the node; decisions go to the failure
	// policy until a cooldown has passed.
	BreakerOpen
	// BreakerHalfOpen: one call at a time probes the node.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// BreakerChange reports a change of a node's circuit breaker.
type BreakerChange struct {
	// Name is the store's name, and Node the node's address.
	Name, Node string
	// From and To are the states before and after the change.
	From, To BreakerState
}

// Lease reports one lease round trip of a lease.Store: a refill that
// asked the store under it for units (OpTakeUpTo).
type Lease struct {
	// Name is the name of the limiter whose pool it refilled (the name
	// its lease.Store was bound under, floodgate.Limiter.Name), and Key
	// the pool's key (never a metric label).
	Name, Key string
	// Units is the number of units asked for, and Granted the number the
	// remote leased.
	Units, Granted int64
	// Err is the remote's error, if the round trip failed.
	Err error
	// Latency is the round trip's duration.
	Latency time.Duration
	// Local is the number of the key's decisions served from its pool
	// since the key's previous Lease, and Waited the number of decisions
	// this round trip made for callers that waited for it (not counting a
	// caller whose context ended first, nor one that went on to another
	// round trip or to the remote): Local/(Local+Waited) over all events
	// is the local hit ratio, and the Waited of all events add up to
	// lease.Stats.Waited.
	Local, Waited int64
}

// Return reports unused units a lease.Store gave back to the store under
// it.
type Return struct {
	// Name is the name of the limiter whose pool it was, and Key the
	// pool's key.
	Name, Key string
	// Units is the number of units given up, and Granted the number the
	// remote took back (fewer when its algorithm cannot take them all
	// back, or the refund failed).
	Units, Granted int64
	// Reason says why: "expired", "replaced" or "closed".
	Reason string
	// Err is the refund's error, if it failed.
	Err error
}

// LimitChange reports a change of an adaptive.Limiter's limit.
type LimitChange struct {
	// Name is the limiter's name.
	Name string
	// Old and New are the limits before and after the change, and
	// InFlight the requests in flight right after it.
	Old, New, InFlight int
}

// Reject reports a request an adaptive.Limiter rejected.
type Reject struct {
	// Name is the limiter's name.
	Name string
	// Partition is the partition or criticality class the request asked
	// for, "" for none.
	Partition string
	// Limit and InFlight are the limit and the requests in flight when it
	// was rejected.
	Limit, InFlight int
	// Reason says why: "limit" (at the limit, and the limiter does not
	// queue: MaxWait NoWait), "queue" (at the limit with MaxWaiters
	// requests already waiting), "timeout" (it waited MaxWait without a
	// slot) or "canceled" (its context ended while it waited).
	Reason string
}

// Shed reports a request a shed.Shedder shed.
type Shed struct {
	// Name is the shedder's name.
	Name string
	// Class is the request's criticality class.
	Class string
	// Utilization is the reading the request was shed at, and Threshold
	// its class's threshold.
	Utilization, Threshold float64
}

// Acquire reports one acquisition of an inflight.Limiter.
type Acquire struct {
	// Name is the limiter's name, and Key the key (never a metric label).
	Name, Key string
	// Outcome says whether a slot was taken, refused, or the call failed
	// (Err).
	Outcome Outcome
	Err     error
	// Limit is the cap of the key, and InFlight the requests in flight
	// on it across processes after the acquisition, as the store counted
	// them.
	Limit, InFlight int64
}

// Release reports the release of a slot an inflight.Limiter admitted.
type Release struct {
	// Name is the limiter's name, and Key the key.
	Name, Key string
	// Held is how long the slot was held, on the monotonic clock.
	Held time.Duration
	// Err is the store's error, if the release failed (the slot then
	// frees when its hold expires).
	Err error
}
