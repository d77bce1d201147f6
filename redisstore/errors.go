package redisstore

import (
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// Errors. Every error a decision returns for a failure of the store
// matches floodgate.ErrUnavailable and one of these (floodgate.ErrClosed
// after Close), and wraps the cause (a go-redis
// or network error, context.DeadlineExceeded for a timeout), all matched
// with errors.Is.
var (
	// ErrTimeout reports a call to Redis that did not answer within
	// Options.Timeout.
	ErrTimeout = errors.New("redisstore: Redis did not answer in time")
	// ErrBreakerOpen reports a decision not sent to Redis because the
	// circuit breaker is open after repeated failures.
	ErrBreakerOpen = errors.New("redisstore: circuit breaker open")
	// ErrRedis reports a failed call to Redis: a network error or an error
	// reply.
	ErrRedis = errors.New("redisstore: Redis call failed")
	// ErrReply reports a reply of Redis that is not what the script returns,
	// or an error the script raised (a corrupt state, a key holding another
	// type). It is never absorbed by the failure policy: Redis answered, and
	// the same call would fail again.
	ErrReply = errors.New("redisstore: unexpected reply")
	// ErrMismatch reports a script whose decision or new state differs from
	// the algorithm's reference transition on the same state and instant. It is a
	// bug in floodgate (or scripts of another version sharing the keys) and
	// is never absorbed by the failure policy.
	ErrMismatch = errors.New("redisstore: script disagrees with the reference transition")
	// ErrInvalidOptions reports unusable Options.
	ErrInvalidOptions = errors.New("redisstore: invalid options")
)

// errBreakerOpen is the error of every decision an open breaker refuses:
// one value, so that an outage's fast failures allocate no error.
var errBreakerOpen = unavailable(ErrBreakerOpen, nil)

// unavailable wraps cause as a failure of the store of the kind sentinel.
func unavailable(sentinel, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %w", floodgate.ErrUnavailable, sentinel)
	}
	return fmt.Errorf("%w: %w: %w", floodgate.ErrUnavailable, sentinel, cause)
}
