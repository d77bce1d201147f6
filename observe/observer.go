package observe

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Observer receives the events of the floodgate components it is given
// to: the decisions of the limiters on a store wrapped by Store, the round
// trips, failures and breaker changes of a store
// (redisstore.Options.Observer), leases (lease.Options.Observer),
// adaptive limits and rejections (adaptive.LimiterOptions.Observer),
// sheds (shed.Options.Observer) and in-flight holds
// (inflight.Options.Observer). Every event carries the Name of the
// component that reported it: for a decision or a lease, the limiter's
// name (floodgate.Limiter.Name).
//
// Each field is optional: a nil field is skipped at the cost of one
// comparison, and a nil *Observer costs nothing. The components call the
// functions synchronously on the goroutine that caused the event (a
// decision's caller, a store's round trip, a background refill), never
// while holding a lock of their own, possibly from many goroutines at
// once: they must be safe for concurrent use and return quickly (count,
// do not block). Events are plain values; a function may keep them.
// Events of concurrent operations may arrive in another order than they
// happened.
//
// Every function receives first the context of the call that caused the
// event (a decision's, an acquisition's, a round trip's), so that an
// adapter can add to its trace span, or context.Background() for events
// of background work (counted failures, a lease refill on its own
// goroutine, an adaptive limit change) and of calls that take no context
// (shed.Shedder.Allow).
//
// An Observer must not be changed once given to a component. The zero
// value is an Observer of nothing.
type Observer struct {
	// Tally, when set, counts every decision of the limiters on a store
	// wrapped by Store with this Observer, for an adapter to read when it
	// is scraped: the cheap way to count decisions (one atomic addition
	// each).
	Tally *Tally

	// OnDecision receives every decision of the limiters on a store
	// wrapped by Store, as an event: for logs and traces, at the cost of
	// building the event and calling the function (docs/observability.md
	// has the figures). Count decisions with Tally instead.
	OnDecision func(context.Context, DecisionEvent)

	// OnTimed receives the decisions that were timed (one in
	// LatencyEvery), with their Latency: what an adapter that counts with
	// Tally needs for a latency histogram. With OnDecision set too, a
	// timed decision goes to both.
	OnTimed func(context.Context, DecisionEvent)

	// OnStoreCall receives every round trip a remote store makes: one
	// script call, or one pipeline of a batching store.
	OnStoreCall func(context.Context, StoreCall)

	// OnFailures receives the decisions a store could not make (the
	// server was unreachable, slow, or its breaker open), counted: at
	// most one event per node and policy every FailureInterval, so that
	// an outage does not flood it.
	OnFailures func(context.Context, Failures)

	// OnBreaker receives every change of state of a store's circuit
	// breaker.
	OnBreaker func(context.Context, BreakerChange)

	// OnLease receives every lease round trip of a lease.Store, and
	// OnReturn every return of unused units.
	OnLease  func(context.Context, Lease)
	OnReturn func(context.Context, Return)

	// OnLimitChange receives every change of an adaptive.Limiter's limit,
	// and OnReject every request it rejected.
	OnLimitChange func(context.Context, LimitChange)
	OnReject      func(context.Context, Reject)

	// OnShed receives every request a shed.Shedder sheds.
	OnShed func(context.Context, Shed)

	// OnAcquire receives every acquisition of an inflight.Limiter
	// (admitted, denied or failed), and OnRelease every release of a slot
	// it admitted.
	OnAcquire func(context.Context, Acquire)
	OnRelease func(context.Context, Release)

	// LatencyEvery is how often a store wrapped by Store times a
	// decision: one decision in LatencyEvery has DecisionEvent.Latency set
	// (chosen by the Tally's counts when there is one, at random
	// otherwise), when OnDecision or OnTimed is set. Timing reads the
	// monotonic clock twice, which costs more than an in-process decision
	// (a memstore Allow takes about 70 ns; two clock readings took 82 to
	// 95 ns on the kvm-clock of the machine the figures in
	// docs/observability.md come from), so by default one decision in
	// DefaultLatencyEvery is timed: a process deciding 3,000 times a
	// second still times about 47 of them a second. 1 times every
	// decision. Round trips of a remote store (OnStoreCall) are always
	// timed.
	LatencyEvery int

	// FailureInterval is the period over which a store counts its failed
	// decisions before reporting them to OnFailures. The default is
	// DefaultFailureInterval.
	FailureInterval time.Duration
}

// The defaults of an Observer's settings.
const (
	DefaultLatencyEvery    = 64
	DefaultFailureInterval = time.Second
)

// Validate reports an error matching floodgate.ErrInvalidConfig for a
// negative LatencyEvery or FailureInterval. The components given an
// Observer call it when they are built; a nil Observer is valid.
func (o *Observer) Validate() error {
	if o == nil {
		return nil
	}
	if o.LatencyEvery < 0 {
		return fmt.Errorf("%w: observe: LatencyEvery %d is negative", floodgate.ErrInvalidConfig, o.LatencyEvery)
	}
	if o.FailureInterval < 0 {
		return fmt.Errorf("%w: observe: FailureInterval %v is negative", floodgate.ErrInvalidConfig, o.FailureInterval)
	}
	return nil
}

// decisions reports whether o observes decisions at all.
func (o *Observer) decisions() bool {
	return o != nil && (o.Tally != nil || o.OnDecision != nil || o.OnTimed != nil)
}

// latencyThreshold returns the bound under which a random uint32 selects
// a decision for timing: 2^32/LatencyEvery (2^32, every decision, for 1).
func (o *Observer) latencyThreshold() uint64 {
	every := o.LatencyEvery
	if every == 0 {
		every = DefaultLatencyEvery
	}
	return (1 << 32) / uint64(every)
}

// FailureEvery returns the period of OnFailures: FailureInterval, or the
// default when it is not positive. Stores call it; o may be nil.
func (o *Observer) FailureEvery() time.Duration {
	if o == nil || o.FailureInterval <= 0 {
		return DefaultFailureInterval
	}
	return o.FailureInterval
}
