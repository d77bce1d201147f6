package lease

import (
	"fmt"
	"time"
)

// Observer is told of what a Limiter does with its remote: every lease round
// trip and every return of unused units, so that users can count, log and
// graph them (the local hit ratio, refill latency, units returned) without
// floodgate depending on a metrics library.
//
// Observe is called on the goroutine that made the round trip (a refill
// goroutine of the Limiter, or Close), never while the Limiter holds a lock,
// possibly from many goroutines at once: it must be safe for concurrent use
// and return quickly. It may call the Limiter.
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
	// EventLease reports a round trip that asked the remote for units
	// (Apply with OpTakeUpTo), successful or not.
	EventLease EventKind = iota + 1
	// EventReturn reports unused units that a pool gave up: on expiry, when
	// a lease of a later window replaced them, or on Close.
	EventReturn
)

// String returns "lease" or "return".
func (k EventKind) String() string {
	switch k {
	case EventLease:
		return "lease"
	case EventReturn:
		return "return"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// ReturnReason says why a pool gave up units (EventReturn).
type ReturnReason uint8

const (
	// ReturnExpired: the units outlived Options.TTL or the remote window
	// they were counted in.
	ReturnExpired ReturnReason = iota + 1
	// ReturnReplaced: a lease counted in a later window of the remote
	// replaced the pool.
	ReturnReplaced
	// ReturnClosed: the Limiter was closed, or the key's pool was retired
	// while the lease was in flight.
	ReturnClosed
)

// String returns "expired", "replaced" or "closed".
func (r ReturnReason) String() string {
	switch r {
	case ReturnExpired:
		return "expired"
	case ReturnReplaced:
		return "replaced"
	case ReturnClosed:
		return "closed"
	}
	return fmt.Sprintf("ReturnReason(%d)", uint8(r))
}

// Event is one report to an Observer.
type Event struct {
	Kind EventKind
	// Key is the key of the pool.
	Key string

	// Units is the number of units asked for (EventLease) or given up
	// unused (EventReturn).
	Units int64
	// Granted is the number of units the remote leased (EventLease) or
	// took back (EventReturn). A remote whose algorithm cannot take units
	// back any more (a window that ended, tokens that refilled) takes fewer
	// than Units; so does a failed refund.
	Granted int64
	// Err is the remote's error, if the round trip failed.
	Err error

	// Latency is the duration of the round trip on the local clock
	// (EventLease).
	Latency time.Duration
	// Local is the number of decisions on the key served from its pool
	// without a round trip since the key's previous EventLease
	// (EventLease). Local / (Local + Waited) over all events is the local
	// hit ratio; Limiter.Stats sums it for all keys.
	Local int64
	// Waited is the number of decisions that waited for this round trip
	// (EventLease).
	Waited int64

	// Reason says why units were given up (EventReturn).
	Reason ReturnReason
}

// Stats are cumulative counts of a Limiter's decisions and round trips.
type Stats struct {
	// Local is the number of decisions served from a pool without waiting
	// for a round trip.
	Local int64
	// Waited is the number of decisions that waited for a lease round
	// trip: admitted, denied, or failed with the remote's error.
	Waited int64
	// Forwarded is the number of decisions passed to the remote limiter
	// (more units than MaxBatch, Reserve or Wait that a pool could not
	// serve, and pools too contended to serve after a refill).
	Forwarded int64
	// Leases is the number of lease round trips (Apply with OpTakeUpTo), successful or
	// not, in the background or waited for.
	Leases int64
	// Leased is the number of units the remote leased.
	Leased int64
	// Returned is the number of unused units the remote took back.
	Returned int64
}

// LocalRatio returns the fraction of decisions served without a round trip:
// Local / (Local + Waited + Forwarded), or 0 before any decision.
func (s Stats) LocalRatio() float64 {
	total := s.Local + s.Waited + s.Forwarded
	if total == 0 {
		return 0
	}
	return float64(s.Local) / float64(total)
}
