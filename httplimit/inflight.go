package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/inflight"
)

// InflightOptions configures NewInflight. A nil *InflightOptions means the
// defaults: requests keyed by the peer address (IPv6 grouped by /64, no
// proxy trusted), a slot held from the handler's start until it returns,
// panics or its request's context ends, and on denial 429 Too Many
// Requests with Retry-After and a JSON body. The zero value means the
// same. NewInflight copies the options; the functions they hold are
// called concurrently and must be safe for concurrent use.
type InflightOptions struct {
	// Key names the limit a request counts against, as Options.Key does.
	// The default is KeyByIP(nil). A request for which Key finds no key
	// goes to ErrorHandler with ErrNoKey: 401 Unauthorized by default.
	// Routes with separate limits have inflight limiters of their own:
	// limiters of different names (inflight.Options.Name, or the names
	// derived from different limits) never share a key's holds.
	Key KeyFunc

	// Skip exempts the requests it returns true for: they reach the
	// handler without taking a slot. The default exempts nothing.
	Skip func(r *http.Request) bool

	// HoldUntilReturn keeps a slot until the handler returns (or panics),
	// even when the request's context ends first. By default the slot is
	// released as soon as the context ends (the client went away, a
	// deadline passed), so that a handler stuck past its request frees its
	// slot for the next one. WARNING: without it, a handler that ignores
	// its context keeps running after its slot is freed, and a client that
	// disconnects at once and retries can keep more such handlers running
	// than the limit: set it for handlers that do not stop when their
	// context ends.
	HoldUntilReturn bool

	// ProblemDetails makes the default denial and error bodies RFC 9457
	// problem details (application/problem+json) instead of JSON error
	// objects. The default is false.
	ProblemDetails bool

	// DenyHandler writes the response to a request denied because its key
	// has Limit requests in flight. When it runs, Retry-After is already
	// set on w.Header(). The default writes 429 Too Many Requests with a
	// JSON body in the shape of headers.ErrorBody, code
	// "concurrency_limit_exceeded", policy "inflight", limit the in-flight
	// limit, remaining 0, and reset and retry_after the Retry-After in
	// seconds.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d inflight.Status)

	// ErrorHandler writes the response when no decision could be made,
	// as Options.ErrorHandler does, with the same defaults: ErrNoKey is
	// 401; a failing store (floodgate.ErrUnavailable) or an ended context
	// is 503 with Retry-After of UnavailableRetryAfter; anything else
	// (floodgate.ErrKeyTooLong, floodgate.ErrClosed) is 500.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// Challenge is the WWW-Authenticate field of the default 401 answer,
	// as Options.Challenge. It must be printable ASCII.
	Challenge string

	// UnavailableRetryAfter is the Retry-After of the default 503 answer,
	// as Options.UnavailableRetryAfter. The default is 1 second; a
	// negative value is an error.
	UnavailableRetryAfter time.Duration

	// OnDecision, when set, is called with every decision before the
	// request is served or denied. It runs on the request's goroutine and
	// must not block.
	OnDecision func(r *http.Request, key string, d inflight.Status)
}

// codeInflight is the code of the JSON body of a denial by NewInflight, and
// inflightPolicy the policy it names, apart from the rate middleware's.
const (
	codeInflight   = "concurrency_limit_exceeded"
	inflightPolicy = "inflight"
)

// inflightMiddleware is a validated InflightOptions bound to a Limiter.
type inflightMiddleware struct {
	lim *inflight.Limiter
	o   InflightOptions
	// answers is the rate middleware configured for the answers both
	// share: 401, 503 and 500, without rate-limit fields; plan names the
	// in-flight limit in the 503's body.
	answers *middleware
	plan    *plan
}

// NewInflight returns net/http middleware that lets at most lim.Limit()
// requests of each key run at once, configured by opts (nil means the
// defaults; see InflightOptions), or an error matching
// floodgate.ErrInvalidConfig when lim is nil or not made by inflight.New,
// or the options are unusable: every configuration error is reported
// here, never on a request.
//
// For each request not skipped it finds the key and takes a slot with
// lim.Acquire. An admitted request holds its slot while the handler runs:
// the slot is released when the handler returns, when it panics (the
// panic then goes on, after the release) and, unless HoldUntilReturn,
// when the request's context ends. A request whose key has Limit requests
// in flight never reaches the handler: it gets 429 Too Many Requests with
// Retry-After (the Limiter's Options.RetryAfter, in whole seconds, at least
// 1) and a JSON body.
//
// It sends no RateLimit fields: they describe a quota restored over a
// window, which a limit of requests in flight is not. Put it beside the
// rate-limit middleware of New, which does.
func NewInflight(lim *inflight.Limiter, opts *InflightOptions) (func(http.Handler) http.Handler, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: nil inflight limiter", floodgate.ErrInvalidConfig)
	}
	if lim.Limit() < 1 {
		// inflight.New refuses a limit below 1: this Limiter was not made
		// by it, and would fail on every request.
		return nil, fmt.Errorf("%w: an inflight.Limiter not made by inflight.New", floodgate.ErrInvalidConfig)
	}
	m := &inflightMiddleware{lim: lim}
	if opts != nil {
		m.o = *opts
	}
	o := &m.o
	if o.Key == nil {
		o.Key = KeyByIP(nil)
	}
	if !printableASCII(o.Challenge) {
		return nil, fmt.Errorf("%w: Challenge %q is not printable ASCII", floodgate.ErrInvalidConfig, o.Challenge)
	}
	switch {
	case o.UnavailableRetryAfter < 0:
		return nil, fmt.Errorf("%w: negative UnavailableRetryAfter %v", floodgate.ErrInvalidConfig, o.UnavailableRetryAfter)
	case o.UnavailableRetryAfter == 0:
		o.UnavailableRetryAfter = defaultUnavailableRetryAfter
	}
	// The answers of the rate middleware without its fields (style 0
	// writes Retry-After alone); the 503's body names the in-flight limit.
	m.answers = &middleware{o: Options{
		ProblemDetails:        o.ProblemDetails,
		Challenge:             o.Challenge,
		UnavailableRetryAfter: o.UnavailableRetryAfter,
	}}
	m.plan = &plan{policies: []headers.Policy{{Name: inflightPolicy, Quota: fieldCount(lim.Limit())}}}
	if o.DenyHandler == nil {
		o.DenyHandler = m.deny
	}
	if o.ErrorHandler == nil {
		o.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			m.answers.answerError(w, r, m.plan, err)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}, nil
}

func (m *inflightMiddleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	o := &m.o
	if o.Skip != nil && o.Skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	key, ok := o.Key(r)
	if !ok || key == "" {
		o.ErrorHandler(w, r, ErrNoKey)
		return
	}
	ctx := r.Context()
	slot, err := m.lim.Acquire(ctx, key)
	if err != nil {
		o.ErrorHandler(w, r, err)
		return
	}
	if o.OnDecision != nil {
		o.OnDecision(r, key, slot.Status)
	}
	if !slot.Allowed {
		w.Header().Set(headers.FieldRetryAfter, headers.FormatRetryAfter(slot.RetryAfter))
		o.DenyHandler(w, r, slot.Status)
		return
	}
	// Deferred, the release runs when the handler returns and while a
	// panic unwinds, which then goes on. Release is idempotent and safe
	// from two goroutines, so the context's release may race it.
	defer slot.Release(ctx)
	if !o.HoldUntilReturn {
		stop := context.AfterFunc(ctx, func() { _ = slot.Release(ctx) })
		defer stop()
	}
	next.ServeHTTP(w, r)
}

// deny is the default DenyHandler.
func (m *inflightMiddleware) deny(w http.ResponseWriter, r *http.Request, d inflight.Status) {
	rep := headers.Report{
		Policy:     headers.Policy{Name: inflightPolicy, Quota: fieldCount(d.Limit)},
		Denied:     true,
		RetryAfter: fieldDuration(d.RetryAfter),
	}
	s := rep.RetryAfterSeconds()
	unit := " seconds."
	if s == 1 {
		unit = " second."
	}
	msg := "Too many requests in flight; retry after " + strconv.FormatInt(s, 10) + unit
	if m.o.ProblemDetails {
		writeJSON(w, headers.ContentTypeProblem, http.StatusTooManyRequests, headers.Problem{
			Type: "about:blank", Title: http.StatusText(http.StatusTooManyRequests),
			Status: http.StatusTooManyRequests, Detail: msg,
		})
		return
	}
	body := headers.NewErrorBody(rep)
	body.Error.Code, body.Error.Message = codeInflight, msg
	writeJSON(w, headers.ContentTypeJSON, http.StatusTooManyRequests, body)
}
