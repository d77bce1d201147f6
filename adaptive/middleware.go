package adaptive

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate/headers"
)

// MiddlewareOptions configures Middleware. A nil *MiddlewareOptions, or a
// zero field, means the default.
type MiddlewareOptions struct {
	// Partition returns the partition of a request (a Partition's Name or a
	// Class constant; on a Limiter without partitions, ClassCritical is the
	// one name that counts, see LimiterOptions.Partitions). The default
	// sends every request through Acquire, with no partition.
	Partition func(*http.Request) string
	// RejectStatus is the status of a rejected request; it must be a 4xx or
	// 5xx code. The default is 503 Service Unavailable, which tells clients
	// and load balancers that this instance is overloaded (429 would blame
	// the client).
	RejectStatus int
	// RetryAfter is the value of the Retry-After header of a rejection,
	// in whole seconds rounded up and at least 1, as package headers
	// writes it (headers.FormatRetryAfter) for every middleware of this
	// module. The default is 1s: a concurrency slot frees up as soon as
	// any request ends, so a short hint is accurate. A negative value is
	// an error.
	RetryAfter time.Duration
	// Timeout, when set, gives each admitted request's context this
	// deadline, so that a handler still running at it counts as Dropped even
	// when nothing upstream set a deadline. It costs a context and a timer
	// per request. The default is none: only a deadline already on the
	// request's context counts.
	Timeout time.Duration
	// Rejected writes the response to a rejected request; the Retry-After
	// header is already set. The default writes RejectStatus with the
	// plain-text body "concurrency limit exceeded".
	Rejected http.Handler
	// Outcome, when set, decides how a request is reported to the Limiter
	// when its handler returned before the request's context ended (the
	// case that is otherwise a Success). It gets the status code the
	// handler wrote (200 if it wrote none) and the request as the handler
	// saw it. Return Dropped for responses that mean overload, such as the
	// handler's own 503 or 504 when a dependency is saturated, so that
	// loss-based limits back off; Ignore for failures whose latency says
	// nothing about capacity (a fast 400); Success otherwise. Any other
	// value counts as Ignore. A request whose context ended, or whose
	// handler panicked, is reported as described at Middleware and Outcome
	// is not called; a panic in Outcome releases the slot with Ignore.
	//
	// Setting it wraps the ResponseWriter to record the status, which costs
	// one small allocation per request. The wrapper implements http.Flusher
	// and Unwrap, so http.ResponseController reaches every other method of
	// the original writer (Hijack, deadlines); a type assertion on the
	// wrapped writer finds only http.Flusher. The default is nil: such a
	// request is a Success and the writer is passed on unwrapped.
	Outcome func(status int, r *http.Request) Outcome
}

// Middleware returns net/http middleware that admits each request through
// l and reports how it ended:
//
//   - the handler returned before its context ended: Success, or what
//     MiddlewareOptions.Outcome returns for the status the handler wrote;
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
//
// Middleware returns an error matching ErrInvalidOption when l is nil or
// not made by NewLimiter, or an option is out of range: every
// configuration error is reported here, never on a request.
func Middleware(l *Limiter, opts *MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if l == nil || l.limit == nil {
		return nil, invalid("Middleware needs a Limiter made by NewLimiter")
	}
	var o MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	if o.Timeout < 0 {
		return nil, invalid("MiddlewareOptions.Timeout %v is negative", o.Timeout)
	}
	if o.RejectStatus == 0 {
		o.RejectStatus = http.StatusServiceUnavailable
	}
	if o.RejectStatus < 400 || o.RejectStatus > 599 {
		return nil, invalid("MiddlewareOptions.RejectStatus %d is not a 4xx or 5xx code", o.RejectStatus)
	}
	switch {
	case o.RetryAfter < 0:
		return nil, invalid("MiddlewareOptions.RetryAfter %v is negative", o.RetryAfter)
	case o.RetryAfter == 0:
		o.RetryAfter = time.Second
	}
	if o.Rejected == nil {
		o.Rejected = plainText(o.RejectStatus, "concurrency limit exceeded")
	}
	m := &middleware{l: l, o: o, retryAfter: headers.FormatRetryAfter(o.RetryAfter)}
	return func(next http.Handler) http.Handler {
		mw := *m
		mw.next = next
		return &mw
	}, nil
}

type middleware struct {
	l          *Limiter
	o          MiddlewareOptions // with the defaults filled in
	retryAfter string            // the Retry-After of a rejection, formatted once
	next       http.Handler
}

// plainText is the default answer to a rejected request: status and msg as
// a line of text.
func plainText(status int, msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, status)
	})
}

// reject answers a rejected request: Retry-After, then Rejected.
func (m *middleware) reject(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(headers.FieldRetryAfter, m.retryAfter)
	m.o.Rejected.ServeHTTP(w, r)
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
		m.reject(w, r)
		return
	}
	if m.o.Timeout > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), m.o.Timeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	// The writer is wrapped only for Outcome, so that the default path
	// allocates nothing.
	var sw *statusWriter
	if m.o.Outcome != nil {
		sw = &statusWriter{ResponseWriter: w}
		w = sw
	}
	// The deferred Ignore runs only if the handler or Outcome panics:
	// recovering and re-panicking would lose the original stack.
	ended := false
	defer func() {
		if !ended {
			tok.Ignore()
		}
	}()
	m.next.ServeHTTP(w, r)
	o := m.outcome(r, sw)
	ended = true
	tok.end(o)
}

// outcome returns how the request r, whose handler has returned, ended; sw
// is its status recorder, nil without MiddlewareOptions.Outcome.
func (m *middleware) outcome(r *http.Request, sw *statusWriter) Outcome {
	switch err := r.Context().Err(); {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded):
		return Dropped
	default:
		return Ignore
	}
	if sw == nil {
		return Success
	}
	status := sw.status
	if status == 0 {
		status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	switch o := m.o.Outcome(status, r); o {
	case Success, Dropped:
		return o
	default:
		return Ignore
	}
}

// statusWriter records the status code a handler writes, for
// MiddlewareOptions.Outcome. It intercepts only what it must; Unwrap lets
// http.ResponseController reach the wrapped writer's other methods, and Flush
// is there too because handlers that stream still assert http.Flusher.
type statusWriter struct {
	http.ResponseWriter
	status int // the final status; 0 until the header is written
}

func (w *statusWriter) WriteHeader(code int) {
	// As in net/http, informational 1xx headers other than 101 may precede
	// the final status and do not fix it.
	if w.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher. Over a writer that cannot flush it does
// nothing (http.Flusher has no way to say so; FlushError does).
func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError is the method http.ResponseController.Flush prefers, so that
// the wrapped writer's error (http.ErrNotSupported included) reaches it.
func (w *statusWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err == nil && w.status == 0 {
		w.status = http.StatusOK // flushing sent the header
	}
	return err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
