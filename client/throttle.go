package client

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrThrottled matches the errors of requests the Transport rejected itself,
// without sending them, under adaptive throttling.
var ErrThrottled = errors.New("client: request throttled locally")

// ThrottledError is the error of a request rejected locally by adaptive
// throttling. It matches ErrThrottled with errors.Is. It is a plain value,
// safe to copy and share.
type ThrottledError struct {
	// Probability is the rejection probability in force when the request
	// was rejected.
	Probability float64
}

// Error describes the rejection.
func (e *ThrottledError) Error() string {
	return fmt.Sprintf("client: request throttled locally (rejecting %.0f%% of requests: the backend is rejecting most of them)", e.Probability*100)
}

// Unwrap returns ErrThrottled.
func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// ThrottleOptions enables client-side adaptive throttling, as described in
// "Handling Overload" of Google's Site Reliability Engineering book: over a
// sliding window the client counts the requests its callers attempted and
// those the backend accepted, and rejects a new request locally with
// probability
//
//	max(0, (requests − K·accepts) / (requests + 1))
//
// so that a backend that rejects most requests is relieved of the surplus
// before it arrives, and traffic recovers as soon as it accepts again.
// Responses other than 429 and 503 count as accepted; 429, 503 and
// connection errors do not; requests the caller cancels are not counted.
// The zero value means the defaults. Locally rejected requests count as
// requests, and so do retries: each
// attempt is a request to the backend.
//
// The formula is meant for clients that send many requests per window: with
// few, a single rejection weighs heavily (one 503 in an empty window rejects
// the next request locally with probability 1/2).
type ThrottleOptions struct {
	// K is the multiplier: the backend keeps seeing about K times the
	// traffic it accepts, and a lower K throttles harder. At least 1.
	// The default is 2.
	K float64

	// Window is the time the counts cover. It should be longer than the
	// slowest response. The default is 2 minutes.
	Window time.Duration
}

// throttleBuckets is the number of slices the window is counted in: the
// window slides by Window/throttleBuckets.
const throttleBuckets = 24

// throttle holds the sliding counts. Its methods are safe for concurrent use.
type throttle struct {
	k      float64
	bucket time.Duration // length of one slice

	mu      sync.Mutex
	slots   [throttleBuckets]throttleSlot
	current int64 // index of the newest slice: unix nanoseconds / bucket
}

type throttleSlot struct {
	index             int64 // the slice this slot counts, to detect stale slots
	requests, accepts int64
}

func newThrottle(o ThrottleOptions) (*throttle, error) {
	if o.K == 0 {
		o.K = 2
	}
	if !(o.K >= 1) || o.K > 1e6 { // !(>=) also rejects NaN
		return nil, fmt.Errorf("client: ThrottleOptions.K = %v, want at least 1", o.K)
	}
	if o.Window == 0 {
		o.Window = 2 * time.Minute
	}
	if o.Window < throttleBuckets {
		return nil, fmt.Errorf("client: ThrottleOptions.Window = %v, want at least %dns", o.Window, throttleBuckets)
	}
	return &throttle{k: o.K, bucket: o.Window / throttleBuckets}, nil
}

// slot returns the slot counting the slice of now, resetting it when it last
// counted an older slice. A clock that steps back counts into the newest
// slice. The caller holds mu.
func (t *throttle) slot(now time.Time) *throttleSlot {
	i := max(now.UnixNano()/int64(t.bucket), t.current)
	t.current = i
	s := &t.slots[uint64(i)%throttleBuckets]
	if s.index != i {
		*s = throttleSlot{index: i}
	}
	return s
}

// totals sums the slots of the window ending at the newest slice.
func (t *throttle) totals() (requests, accepts int64) {
	for i := range t.slots {
		s := &t.slots[i]
		if s.index > t.current-throttleBuckets && s.index <= t.current {
			requests += s.requests
			accepts += s.accepts
		}
	}
	return requests, accepts
}

func (t *throttle) probability() float64 {
	req, acc := t.totals()
	p := (float64(req) - t.k*float64(acc)) / float64(req+1)
	return max(0, p)
}

// ticket identifies a counted request so that its outcome lands in the same
// slice.
type ticket struct{ index int64 }

// admit counts a request and decides whether to send it, given u drawn
// uniformly from [0, 1).
func (t *throttle) admit(now time.Time, u float64) (ticket, float64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.probability()
	s := t.slot(now)
	s.requests++
	return ticket{s.index}, p, u >= p
}

// done records the outcome of an admitted request: accepted by the backend,
// or cancelled by the caller (then the request is forgotten).
func (t *throttle) done(tk ticket, accepted, cancelled bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.slots[uint64(tk.index)%throttleBuckets]
	if s.index != tk.index {
		return // the slice left the window: nothing to correct
	}
	switch {
	case cancelled:
		s.requests--
	case accepted:
		s.accepts++
	}
}

// rejectProbability reports the current probability at now.
func (t *throttle) rejectProbability(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slot(now)
	return t.probability()
}
