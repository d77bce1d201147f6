package floodgate

import (
	"fmt"
	"time"
)

// LeakyBucket shapes traffic to a constant rate: admitted requests leave a
// FIFO queue exactly n·Per/Rate apart, so no burst ever passes, and the queue
// holds at most Capacity units of work. Use it in front of a dependency that
// must see an even rate (a payment provider, a database batch job).
//
// A request departs at max(now, tail), where tail is the departure slot after
// the last admitted request, and moves the tail to that instant plus n·Per/Rate.
// It is admitted when the work queued ahead of it plus its own cost fits in
// the bucket: max(0, tail−now)·Rate/Per + n ≤ Capacity. Decision.Delay is the
// time until its departure. AllowN admits only requests that depart at once;
// Reserve and Wait queue. The emission interval is rounded up to a whole
// nanosecond, as for TokenBucket.
//
// Units cannot be refunded: a departure slot, once given, fixes the slots of
// the requests behind it.
//
// The zero value is not usable; LeakyBucket is a plain value, safe to copy
// and to share.
type LeakyBucket struct {
	// Rate is the number of units that depart per Per; at least 1.
	Rate int64
	// Per is the period of Rate; at least Rate nanoseconds.
	Per time.Duration
	// Capacity is the most units of work the queue holds, including the
	// request being admitted; at least 1. Capacity/Rate·Per must be at most
	// MaxWindow.
	Capacity int64
}

var _ Algorithm = LeakyBucket{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a LeakyBucket) Validate() error {
	_, _, err := emission(a.Rate, a.Per, a.Capacity, "Capacity")
	return err
}

// Policy returns Capacity units drained in Capacity/Rate·Per.
func (a LeakyBucket) Policy() Policy {
	_, tau, err := emission(a.Rate, a.Per, a.Capacity, "Capacity")
	if err != nil {
		return Policy{}
	}
	return Policy{Quota: a.Capacity, Window: time.Duration(tau)}
}

func (LeakyBucket) algorithm() {}

// String describes the configuration, e.g. "LeakyBucket{10 per 1s, capacity 50}".
func (a LeakyBucket) String() string {
	return fmt.Sprintf("LeakyBucket{%d per %v, capacity %d}", a.Rate, a.Per, a.Capacity)
}
