package adaptive

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// MiddlewareOptions configures Middleware. A nil *MiddlewareOptions, or a
// zero field, means the default.
type MiddlewareOptions struct {
	// Partition returns the partition of a request (a Partition's Name or a
	// Class constant). The default sends every request through Acquire, with
	// no partition.
	Partition func(*http.Request) string
	// RejectStatus is the status of a rejected request; it must be a 4xx or
	// 5xx code. The default is 503 Service Unavailable, which tells clients
	// and load balancers that this instance is overloaded (429 would blame
	// the client).
	RejectStatus int
	// RetryAfter is the value of the Retry-After header of a rejection,
	// rounded up to whole seconds. The default is 1s: a concurrency slot
	// frees up as soon as any request ends, so a short hint is accurate.
	RetryAfter time.Duration
	// Timeout, when set, gives each admitted request's context this
	// deadline, so that a handler still running at it counts as Dropped even
	// when nothing upstream set a deadline. It costs a context and a timer
	// per request. The default is none: only a deadline already on the
	// request's context counts.
	Timeout time.Duration
	// Rejected writes the response to a rejected request; the Retry-After
	// header is already set. The default writes RejectStatus with a short
	// plain-text body.
	Rejected http.Handler
}

// Middleware returns net/http middleware that admits each request through
// l and reports how it ended:
//
//   - the handler returned before its context ended: Success;
//   - the request's context passed its deadline (the handler overran the
//     deadline set by Timeout or by an outer layer): Dropped, so that
//     loss-based limits back off;
//   - the request's context was cancelled (the client went away), or the
//     handler panicked: Ignore, since the latency means nothing. A panic
//     propagates unchanged after the slot is released.
//
// A rejected request (ErrLimitExceeded, or the context ending while it
// waited) gets RejectStatus with a Retry-After header and never reaches the
// handler.
func Middleware(l *Limiter, opts *MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if l == nil {
		return nil, invalid("Middleware needs a Limiter")
	}
	var o MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	if o.RejectStatus == 0 {
		o.RejectStatus = http.StatusServiceUnavailable
	}
	if o.RejectStatus < 400 || o.RejectStatus > 599 {
		return nil, invalid("MiddlewareOptions.RejectStatus %d is not a 4xx or 5xx code", o.RejectStatus)
	}
	if o.RetryAfter < 0 || o.Timeout < 0 {
		return nil, invalid("MiddlewareOptions has a negative duration")
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	if o.Rejected == nil {
		status := o.RejectStatus
		o.Rejected = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "concurrency limit exceeded", status)
		})
	}
	retryAfter := strconv.FormatInt(int64((o.RetryAfter+time.Second-1)/time.Second), 10)
	return func(next http.Handler) http.Handler {
		return &middleware{l: l, o: o, retryAfter: retryAfter, next: next}
	}, nil
}

type middleware struct {
	l          *Limiter
	o          MiddlewareOptions
	retryAfter string
	next       http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var tok Token
	var err error
	if m.o.Partition != nil {
		tok, err = m.l.AcquirePartition(r.Context(), m.o.Partition(r))
	} else {
		tok, err = m.l.Acquire(r.Context())
	}
	if err != nil {
		w.Header().Set("Retry-After", m.retryAfter)
		m.o.Rejected.ServeHTTP(w, r)
		return
	}
	if m.o.Timeout > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), m.o.Timeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	// The deferred Ignore runs only if the handler panics: recovering and
	// re-panicking would lose the original stack.
	returned := false
	defer func() {
		if !returned {
			tok.Ignore()
		}
	}()
	m.next.ServeHTTP(w, r)
	returned = true
	switch err := r.Context().Err(); {
	case err == nil:
		tok.Success()
	case errors.Is(err, context.DeadlineExceeded):
		tok.Dropped()
	default:
		tok.Ignore()
	}
}
