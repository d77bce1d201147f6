package shed

import (
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/headers"
)

// MiddlewareOptions configures Middleware. A nil *MiddlewareOptions, or a
// zero field, means the default. The fields are those of
// adaptive.MiddlewareOptions that apply to shedding.
type MiddlewareOptions struct {
	// Class returns the criticality class of a request: one of adaptive's
	// Class constants; any other name counts as adaptive.ClassDefault. The
	// default gives every request adaptive.ClassDefault.
	Class func(*http.Request) string
	// RejectStatus is the status of a shed request; it must be a 4xx or
	// 5xx code. The default is 503 Service Unavailable: the server is
	// overloaded, not the client at fault (429 would blame the client).
	RejectStatus int
	// RetryAfter is the value of the Retry-After header of a shed request,
	// in whole seconds rounded up and at least 1, as package headers
	// writes it (headers.FormatRetryAfter) for every middleware of this
	// module. The default is 1s. A negative value is an error.
	RetryAfter time.Duration
	// Rejected writes the response to a shed request; the Retry-After
	// header is already set. The default writes RejectStatus with the
	// plain-text body "overloaded: request shed".
	Rejected http.Handler
}

// Middleware returns net/http middleware that asks s about each request
// (with the class MiddlewareOptions.Class gives it) and answers a shed one
// with RejectStatus and Retry-After, without calling the handler. A
// request that is allowed reaches the handler unchanged, and the middleware
// allocates nothing on its way.
//
// Put it in front of adaptive.Middleware (or any limiter): shedding by
// utilization first, with room kept for critical traffic, then the
// concurrency limit.
//
// Middleware returns an error matching ErrInvalidOption when s is nil or
// not made by New, or an option is out of range: every configuration
// error is reported here, never on a request.
func Middleware(s *Shedder, opts *MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if s == nil || s.gauge == nil {
		return nil, invalid("Middleware needs a Shedder made by New")
	}
	var o MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	if o.Class == nil {
		o.Class = func(*http.Request) string { return adaptive.ClassDefault }
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
		status := o.RejectStatus
		o.Rejected = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "overloaded: request shed", status)
		})
	}
	retryAfter := headers.FormatRetryAfter(o.RetryAfter)
	return func(next http.Handler) http.Handler {
		return &middleware{s: s, class: o.Class, retryAfter: retryAfter, rejected: o.Rejected, next: next}
	}, nil
}

type middleware struct {
	s          *Shedder
	class      func(*http.Request) string
	retryAfter string // the Retry-After of a shed request, formatted once
	rejected   http.Handler
	next       http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d := m.s.Allow(m.class(r)); !d.Allowed {
		w.Header().Set(headers.FieldRetryAfter, m.retryAfter)
		m.rejected.ServeHTTP(w, r)
		return
	}
	m.next.ServeHTTP(w, r)
}
