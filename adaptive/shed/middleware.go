package shed

import (
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/internal/reject"
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
	// in whole seconds rounded up, as adaptive.Middleware writes it.
	// The default is 1s.
	RetryAfter time.Duration
	// Rejected writes the response to a shed request; the Retry-After
	// header is already set. The default writes RejectStatus with a short
	// plain-text body.
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
func Middleware(s *Shedder, opts *MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if s == nil {
		return nil, invalid("Middleware needs a Shedder")
	}
	var o MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	if o.Class == nil {
		o.Class = func(*http.Request) string { return adaptive.ClassDefault }
	}
	answer, err := reject.New(o.RejectStatus, o.RetryAfter, o.Rejected, "overloaded: request shed")
	if err != nil {
		return nil, invalid("%v", err)
	}
	return func(next http.Handler) http.Handler {
		return &middleware{s: s, class: o.Class, reject: answer, next: next}
	}, nil
}

type middleware struct {
	s      *Shedder
	class  func(*http.Request) string
	reject reject.Answer // the 503 (RejectStatus) with Retry-After
	next   http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d := m.s.Allow(m.class(r)); !d.Allowed {
		m.reject.ServeHTTP(w, r)
		return
	}
	m.next.ServeHTTP(w, r)
}
