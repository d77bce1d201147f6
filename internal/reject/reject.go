// Package reject is the answer that adaptive's and adaptive/shed's
// middleware give a request they refuse for overload: a status (503 by
// default), Retry-After in whole seconds, and a body. It is written once
// here so that both answer alike; users configure it through each
// package's MiddlewareOptions (RejectStatus, RetryAfter, Rejected).
//
// It imports only the standard library, so that adaptive, which depends on
// no other floodgate package, gains none.
package reject

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Answer is the response to a refused request. Create one with New; the
// zero value is not usable. It is immutable and safe for concurrent use.
type Answer struct {
	retryAfter string // the Retry-After value, whole seconds
	rejected   http.Handler
}

// New returns the Answer with the given status (0 means 503 Service
// Unavailable: the server is overloaded, not the client at fault, as a 429
// would say), Retry-After (0 means 1s: a slot or some capacity frees as
// soon as any request ends) rounded up to whole seconds, and body, which
// writes the response once Retry-After is set; a nil body means a
// plain-text msg with the status.
//
// The error names the field of MiddlewareOptions that is out of range (a
// status that is not 4xx or 5xx, a negative Retry-After); the caller wraps
// it with its package's ErrInvalidOption.
func New(status int, retryAfter time.Duration, body http.Handler, msg string) (Answer, error) {
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	if status < 400 || status > 599 {
		return Answer{}, fmt.Errorf("MiddlewareOptions.RejectStatus %d is not a 4xx or 5xx code", status)
	}
	if retryAfter < 0 {
		return Answer{}, fmt.Errorf("MiddlewareOptions.RetryAfter %v is negative", retryAfter)
	}
	if retryAfter == 0 {
		retryAfter = time.Second
	}
	if body == nil {
		body = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, msg, status)
		})
	}
	// Rounded up, so that a client retrying after it finds the capacity
	// the hint promised; at least 1, since the default is 1s and the
	// least positive duration rounds up to 1.
	secs := int64(retryAfter / time.Second)
	if retryAfter%time.Second != 0 {
		secs++ // without adding first, which overflows near the largest Duration
	}
	return Answer{retryAfter: strconv.FormatInt(secs, 10), rejected: body}, nil
}

// ServeHTTP sets Retry-After on w and writes the answer to r.
func (a Answer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", a.retryAfter)
	a.rejected.ServeHTTP(w, r)
}
