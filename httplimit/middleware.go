package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
)

// ErrNoKey reports a request for which the middleware's key function found
// no key: every function of a KeyChain reported none. The default
// ErrorHandler answers it with 401 Unauthorized.
var ErrNoKey = errors.New("httplimit: no rate-limit key for the request")

// DefaultPolicyName is the name of a single algorithm's policy in the
// RateLimit and RateLimit-Policy fields unless Options.PolicyNames (or,
// with NewPlans, Plan.PolicyNames) names it.
const DefaultPolicyName = "default"

// Options configures New and NewPlans. A nil *Options means the defaults:
// every request costs 1 unit of its client address's quota, denials get 429
// with the IETF fields, Retry-After and a JSON body. The zero value means the
// same. New copies the options: later changes to them have no effect, but the
// functions they hold are called concurrently and must be safe for
// concurrent use.
type Options struct {
	// Key names the quota a request draws from. The default is
	// KeyByIP(nil): the peer address, IPv6 grouped by /64, no proxy
	// trusted; behind proxies, or to group addresses otherwise, set Key
	// to KeyByIP with IPKeyOptions. Combine key functions with KeyChain:
	// a function that finds no key (a request without the API key, an
	// anonymous request) hands the request to the next one. A request
	// for which Key finds no key at all is not counted and goes to
	// ErrorHandler with ErrNoKey: 401 Unauthorized by default.
	//
	// The key is the limiter's key as it is: routes with separate quotas
	// have limiters of their own, which never share state when their
	// names differ (floodgate.Options.Name, or the name derived from a
	// configuration).
	Key KeyFunc

	// Cost returns the units a request costs. The default is 1 per
	// request. A cost below 1 or above the limiter's quota is an error
	// (floodgate.ErrInvalidN, floodgate.ErrExceedsLimit) handed to
	// ErrorHandler.
	Cost func(r *http.Request) int64

	// Skip exempts the requests it returns true for (health checks,
	// metrics): they reach the handler without a decision and without
	// rate-limit fields. The default exempts nothing.
	Skip func(r *http.Request) bool

	// Shadow runs the limiter without enforcing it (a dry run): every
	// request is decided, reported to OnDecision and given the rate-limit
	// fields of its decision, but none is denied or delayed, and no
	// Retry-After is sent. A request no decision can be made for (no key,
	// a failed store, an unknown plan, an invalid cost) is reported to
	// OnError and served without fields: a dry run never blocks, so
	// ErrorHandler and DenyHandler are not called. Options New refuses
	// are refused in a dry run too: they are an error at start-up, never
	// on a request. Use it to see what a new limit would do before
	// enforcing it. The default is false.
	Shadow bool

	// MaxDelay turns denial into delay: requests are admitted as
	// floodgate.Limiter.Reserve admits them (through Limiter.Apply with
	// OpTake) and held for Decision.Delay, at most MaxDelay and at most
	// until the request's context ends, before reaching the handler. Use it
	// with a floodgate.LeakyBucket, which shapes traffic into a steady flow,
	// or a floodgate.TokenBucket, which then absorbs bursts by queueing. A
	// request whose context ends while it waits goes to ErrorHandler with
	// the context's error, and its units are given back with Limiter.Apply
	// and OpSettle where the algorithm allows, as Limiter.Wait does (the
	// token bucket and the windows give them back; a leaky bucket's
	// departure slots are promised and stay taken). A store wrapper keeps
	// this as long as its Bound forwards OpSettle to the store it wraps.
	// The default, 0, admits or denies at once (Limiter.AllowN).
	MaxDelay time.Duration

	// Style selects the rate-limit fields sent on every decided response.
	// The zero value means headers.StyleIETF (RateLimit-Policy and
	// RateLimit); styles combine with |.
	Style headers.Style

	// OmitFields sends no rate-limit fields. Denials still carry
	// Retry-After. The default is false.
	OmitFields bool

	// XReset is how StyleX writes X-RateLimit-Reset: delta seconds (the
	// default) or headers.ResetEpoch for Unix seconds, as GitHub does.
	XReset headers.ResetFormat

	// PolicyNames names the policies of New's limiter in the RateLimit
	// fields: one name for a single algorithm, one per limit of a
	// floodgate.Limits in the same order; distinct and printable ASCII.
	// By default a single algorithm's policy is DefaultPolicyName, and a
	// Limits' limits are named after their quota and window,
	// "<quota>-per-<window>" with the window in the largest unit that
	// divides it ("5-per-1s", "1000-per-1m", "20000-per-1d"; a name that
	// repeats gets "-2", "-3"). NewPlans takes the names of each plan in
	// Plan.PolicyNames and refuses this field.
	PolicyNames []string

	// ProblemDetails makes the default denial body RFC 9457 problem details
	// (application/problem+json, type quota-exceeded, violated-policies)
	// instead of floodgate's JSON error object. The default is false.
	ProblemDetails bool

	// DenyHandler writes the response to a denied request. When it runs,
	// the rate-limit fields and Retry-After are already set on
	// w.Header(); for a floodgate.Limits, d is the Decision of the limit
	// that bound (d.Binding). The default writes 429 Too Many Requests
	// with the JSON body described in package headers, whose numbers and
	// "policy" are the binding limit's, or, with ProblemDetails, problem
	// details whose violated-policies lists every limit that denied, the
	// binding one first.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d floodgate.Decision)

	// ErrorHandler writes the response when no decision could be made. It
	// runs with no rate-limit field set on w.Header(). The default answers
	// with a body in the style of the denials: a JSON error object
	//
	//	{"error":{"code":"rate_limit_key_missing","message":"..."}}
	//
	// or, with ProblemDetails, RFC 9457 problem details of type
	// about:blank whose title is the status text. It never holds the
	// error itself, which may name internal hosts. By error:
	//
	//   - ErrNoKey (no key function found a key): 401 Unauthorized, code
	//     rate_limit_key_missing, without rate-limit fields. A request
	//     without its credential is the client's to fix, not a server
	//     error. WWW-Authenticate is Challenge, and absent when that is
	//     empty.
	//   - an error matching floodgate.ErrUnavailable (the store failed,
	//     after its own failure policy: FailOpen and FailLocal stores
	//     return decisions, not errors), context.Canceled or
	//     context.DeadlineExceeded (the request's context ended before
	//     the decision or during its delay): 503 Service Unavailable,
	//     code rate_limit_unavailable, with Retry-After of
	//     UnavailableRetryAfter and the fields of the limiter's policies
	//     in Style, with nothing remaining until then
	//     ("default";r=0;t=1): the remaining quota is unknown, and none
	//     is promised. For a floodgate.Limits the IETF fields list every
	//     limit, in its order, and the trios and the body report the
	//     first. The JSON body holds limit, remaining, reset and
	//     retry_after, as a 429's does. An ended context is answered as a
	//     failed store: HTTP has no status for a client that went away,
	//     and to a client whose deadline passed the limiter did not
	//     answer in time.
	//   - anything else is a fault of the server: an invalid cost
	//     (floodgate.ErrInvalidN, floodgate.ErrExceedsLimit), a key the
	//     limiter refuses (floodgate.ErrKeyTooLong), a plan NewPlans
	//     does not have (ErrUnknownPlan). 500 Internal Server Error, code
	//     rate_limit_error, without rate-limit fields.
	//
	// In Shadow mode ErrorHandler is not called: the request is served.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// Challenge is the WWW-Authenticate field of the default 401 answer to
	// a request without a key, such as `Bearer realm="api"`. RFC 9110
	// (section 15.5.2) asks a 401 to carry a challenge, but only the
	// application knows its authentication scheme, so the default is none:
	// a made-up scheme would mislead clients, and Basic would make
	// browsers prompt for a password. It must be printable ASCII.
	Challenge string

	// UnavailableRetryAfter is the Retry-After of the default 503 answer
	// when no decision could be made, in whole seconds rounded up, and the
	// t of its RateLimit field. The default is 1 second: clients come back
	// soon after a store recovers or fails over, and one answer a second
	// per client is cheap for a store whose breaker is open. A negative
	// value is an error. A client parsing with package headers ignores a
	// Retry-After of more than a day.
	UnavailableRetryAfter time.Duration

	// OnDecision, when set, is called with every decision before the
	// request is served or denied, in shadow mode too. For a
	// floodgate.Limits, d is the binding limit's Decision (d.Binding its
	// index). It runs on the request's goroutine and must not block.
	OnDecision func(r *http.Request, key string, d floodgate.Decision)

	// OnError, when set, is called with every request no decision could
	// be made for and the reason, before ErrorHandler answers it or, in
	// shadow mode, before it is served: the errors ErrorHandler lists.
	// key is the request's key, "" for ErrNoKey. It runs on the request's
	// goroutine and must not block.
	OnError func(r *http.Request, key string, err error)

	// Now is the clock of epoch resets (headers.ResetEpoch). The default
	// is time.Now.
	Now func() time.Time
}

// defaultUnavailableRetryAfter is the default of Options.UnavailableRetryAfter.
const defaultUnavailableRetryAfter = time.Second

// middleware is a validated Options bound to the limiters of its plans.
type middleware struct {
	o        Options
	single   *plan            // New's limiter; nil for NewPlans
	plans    map[string]*plan // NewPlans' plans by name
	choose   func(*http.Request) string
	style    headers.Style
	shaping  bool
	writeOpt headers.WriteOptions
	// each holds *[maxLimits]floodgate.Decision buffers for the
	// decisions of a Limits' limits (Limiter.Apply's each). A buffer on
	// the stack would escape through the store's Bound, an interface, and
	// be allocated on every request; the pool allocates none once warm.
	each sync.Pool
}

// New returns net/http middleware that limits requests with limiter,
// configured by opts (nil means the defaults; see Options), or an error
// matching floodgate.ErrInvalidConfig when limiter is nil or not made by
// floodgate.New, or the options are unusable. Every configuration error is
// reported here, at start-up: the middleware New returns never answers a
// request with one.
//
// For each request not skipped it finds the key, asks the limiter for the
// request's cost, reports the decision in rate-limit fields and either
// calls the next handler (after the decision's delay, when shaping) or
// answers 429 with Retry-After and a JSON body.
//
// A limiter running a floodgate.Limits ("5 per second and 20 per
// minute") is decided through Limiter.Apply with a buffer for each
// limit's Decision, so that the IETF fields list every limit, the binding
// one (Decision.Binding) first; the trios, Retry-After and the body report
// the binding one. Its policies are named by Options.PolicyNames, or after
// their quota and window. A limiter whose store does not fill the
// decisions of each limit (a store wrapper that answers some requests from
// a cache of its own) gets the fields of the binding limit alone.
func New(limiter *floodgate.Limiter, opts *Options) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(opts)
	if err != nil {
		return nil, err
	}
	if m.single, err = m.newPlan("", limiter, m.o.PolicyNames); err != nil {
		return nil, err
	}
	return m.handler, nil
}

// handler is the middleware's func(http.Handler) http.Handler.
func (m *middleware) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// newMiddleware validates the options every middleware shares; the
// constructors add the plans.
func newMiddleware(opts *Options) (*middleware, error) {
	m := &middleware{}
	m.each.New = func() any { return new([maxLimits]floodgate.Decision) }
	if opts != nil {
		m.o = *opts
	}
	o := &m.o
	if o.PolicyNames != nil {
		o.PolicyNames = slices.Clone(o.PolicyNames) // later changes to the caller's slice do not leak in
	}
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
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxDelay < 0 {
		return nil, fmt.Errorf("%w: negative MaxDelay %v", floodgate.ErrInvalidConfig, o.MaxDelay)
	}
	m.shaping = o.MaxDelay > 0
	m.style = o.Style
	if m.style == 0 {
		m.style = headers.StyleIETF
	}
	if m.style&^(headers.StyleIETF|headers.StyleDraft|headers.StyleX) != 0 {
		return nil, fmt.Errorf("%w: unknown header style %v", floodgate.ErrInvalidConfig, o.Style)
	}
	if o.OmitFields {
		m.style = 0
	}
	if o.XReset > headers.ResetEpoch {
		return nil, fmt.Errorf("%w: unknown reset format %d", floodgate.ErrInvalidConfig, o.XReset)
	}
	m.writeOpt.XReset = o.XReset
	return m, nil
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	o := &m.o
	if o.Skip != nil && o.Skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	key, ok := o.Key(r)
	if !ok || key == "" {
		m.fail(w, r, next, nil, "", ErrNoKey)
		return
	}
	p := m.single
	if p == nil {
		name := m.choose(r)
		if p = m.plans[name]; p == nil {
			m.fail(w, r, next, nil, key, &unknownPlanError{name: name})
			return
		}
	}
	n := int64(1)
	if o.Cost != nil {
		n = o.Cost(r)
	}

	ctx := r.Context()
	// each receives the Decision of every limit of a Limits.
	var buf *[maxLimits]floodgate.Decision
	var each []floodgate.Decision
	if p.composite {
		buf = m.each.Get().(*[maxLimits]floodgate.Decision)
		each = buf[:len(p.policies)]
		clear(each) // a limiter that does not fill it leaves zeros, not another request's decisions
	}
	d, refund, err := m.decide(ctx, p, key, n, each)
	if err != nil {
		if buf != nil {
			m.each.Put(buf)
		}
		m.fail(w, r, next, p, key, err)
		return
	}
	if o.OnDecision != nil {
		o.OnDecision(r, key, d)
	}

	var reps [maxLimits]headers.Report
	nrep := m.reports(&reps, p, d, each)
	if buf != nil {
		m.each.Put(buf)
	}
	m.writeFields(w.Header(), p, reps[:nrep])
	if o.Shadow {
		next.ServeHTTP(w, r)
		return
	}
	if !d.Allowed {
		if o.DenyHandler != nil {
			o.DenyHandler(w, r, d)
		} else {
			m.deny(w, reps[:nrep])
		}
		return
	}
	if d.Delay > 0 {
		if err := sleep(ctx, d.Delay); err != nil {
			if refund != nil {
				refund()
			}
			for _, f := range rateLimitFields {
				w.Header().Del(f)
			}
			m.fail(w, r, next, p, key, err)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// decide asks p's limiter for n units of key: AllowN, or Apply when the
// middleware shapes (for the instant of the admission, which a refund
// needs) or p runs a Limits (for each limit's Decision, into each). refund,
// when not nil, gives back a delayed admission that is not served.
func (m *middleware) decide(ctx context.Context, p *plan, key string, n int64, each []floodgate.Decision) (d floodgate.Decision, refund func(), err error) {
	if !m.shaping && !p.composite {
		d, err = p.lim.AllowN(ctx, key, n)
		return d, nil, err
	}
	var maxDelay time.Duration
	if m.shaping {
		maxDelay = m.o.MaxDelay
		if deadline, ok := ctx.Deadline(); ok {
			maxDelay = max(0, min(maxDelay, time.Until(deadline)))
		}
	}
	res, err := p.lim.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n, MaxDelay: maxDelay}, each)
	if err == nil && res.Allowed && res.Delay > 0 {
		refund = func() {
			// On a context that outlives the request's; a failed refund
			// only leaves the units spent.
			req := floodgate.Request{Op: floodgate.OpSettle, N: -n, At: res.At.Add(res.Delay)}
			_, _ = p.lim.Apply(context.WithoutCancel(ctx), key, req, nil)
		}
	}
	return res.Decision, refund, err
}

// fail handles a request no decision could be made for: OnError, then
// ErrorHandler, or, in shadow mode, the next handler. p is the request's
// plan, nil when it has none (yet).
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, next http.Handler, p *plan, key string, err error) {
	o := &m.o
	if o.OnError != nil {
		o.OnError(r, key, err)
	}
	if o.Shadow {
		next.ServeHTTP(w, r)
		return
	}
	if o.ErrorHandler != nil {
		o.ErrorHandler(w, r, err)
		return
	}
	m.answerError(w, r, p, err)
}

// rateLimitFields are every field writeFields may set.
var rateLimitFields = []string{
	headers.FieldRateLimitPolicy, headers.FieldRateLimit,
	headers.FieldRateLimitLimit, headers.FieldRateLimitRemaining, headers.FieldRateLimitReset,
	headers.FieldXRateLimitLimit, headers.FieldXRateLimitRemaining, headers.FieldXRateLimitReset,
	headers.FieldRetryAfter,
}

// report converts a decision of the limit whose policy is pol into the
// terms of package headers, in the range the fields carry (see fieldCount
// and fieldDuration), so that every decision can be written and the body
// agrees with the fields.
func report(pol headers.Policy, d floodgate.Decision) headers.Report {
	if d.Limit > 0 {
		pol.Quota = fieldCount(d.Limit)
	}
	return headers.Report{
		Policy:     pol,
		Remaining:  fieldCount(d.Remaining),
		ResetAfter: fieldDuration(d.ResetAfter),
		Denied:     !d.Allowed,
		RetryAfter: fieldDuration(d.RetryAfter),
	}
}

// reports fills reps with the reports of d, p's decision, and returns how
// many it filled: for a Limits, the binding limit's (d) first, then every
// other limit's from each in the order of the Limits; the binding one
// alone when each was not filled (see New).
//
// On a denial, the limits that would have admitted the request report
// what they would have left after it (the each of Limiter.Apply on a
// denial: nothing was taken), which tells the client less than it may
// use, never more.
func (m *middleware) reports(reps *[maxLimits]headers.Report, p *plan, d floodgate.Decision, each []floodgate.Decision) int {
	b := d.Binding
	if !p.composite || b < 0 || b >= len(p.policies) {
		b = 0
	}
	reps[0] = report(p.policies[b], d)
	if !p.composite {
		return 1
	}
	for i := range each {
		if each[i].Limit <= 0 {
			return 1 // not filled: every limit's quota is at least 1
		}
	}
	n := 1
	for i := range each {
		if i != b {
			reps[n] = report(p.policies[i], each[i])
			n++
		}
	}
	return n
}

// fieldCount returns n in the range of the fields' integers. A count above
// headers.MaxInteger (the quotas reach 2^53; a Structured Field Integer
// stops at 15 digits) is sent as headers.MaxInteger: a client is told less
// than it may use, never more. Omitting the field instead would leave the
// IETF fields without the q and r they require. A negative count, which no
// Limiter of this module reports, is sent as 0.
func fieldCount(n int64) int64 {
	return min(max(n, 0), headers.MaxInteger)
}

// maxFieldDuration is the longest duration the fields carry: whole seconds
// that a time.Duration read back from them still holds (292 years).
const maxFieldDuration = math.MaxInt64 / time.Second * time.Second

// fieldDuration returns d in the range of the fields' seconds: negative
// durations are 0, and durations beyond maxFieldDuration, which no Limiter
// of this module reports, are maxFieldDuration.
func fieldDuration(d time.Duration) time.Duration {
	return min(max(d, 0), maxFieldDuration)
}

// writeReports sets the rate-limit fields of reps, decisions of p's
// policies, in the middleware's style, and Retry-After when reps[0] is a
// denial. The reports are in range, so WriteReports cannot fail on them;
// the policy names were checked when the plan was made. The text of p's
// policies was formatted when the plan was made: the fields cost two
// allocations (see headers.PolicySet.WriteReports), and each response
// owns its fields' values, which a handler may change.
func (m *middleware) writeReports(h http.Header, p *plan, reps []headers.Report) {
	opts := m.writeOpt
	if m.o.XReset == headers.ResetEpoch {
		opts.Now = m.o.Now()
	}
	_ = p.fields.WriteReports(h, m.style, reps, &opts)
}

// writeFields sets the rate-limit fields of a decision's reports, and
// Retry-After on an enforced denial.
func (m *middleware) writeFields(h http.Header, p *plan, reps []headers.Report) {
	m.writeReports(h, p, reps)
	if m.o.Shadow {
		// Nothing is denied in a dry run; t still tells when the
		// request would have been admitted.
		h.Del(headers.FieldRetryAfter)
	}
}

// deny is the default DenyHandler, given the decision's reports: 429 with
// the JSON error body of the binding limit (reps[0]), or problem details
// naming every limit that denied, the binding one first.
func (m *middleware) deny(w http.ResponseWriter, reps []headers.Report) {
	if !m.o.ProblemDetails {
		writeJSON(w, headers.ContentTypeJSON, http.StatusTooManyRequests, headers.NewErrorBody(reps[0]))
		return
	}
	prob := headers.NewProblem(reps[0])
	for _, rep := range reps[1:] {
		if rep.Denied {
			prob.ViolatedPolicies = append(prob.ViolatedPolicies, rep.Policy.Name)
		}
	}
	writeJSON(w, headers.ContentTypeProblem, http.StatusTooManyRequests, prob)
}

func writeJSON(w http.ResponseWriter, contentType string, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Unreachable: the bodies hold strings and integers only. An
		// empty object keeps even this answer JSON.
		body = []byte("{}")
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	// RFC 6585: a 429 must not be stored by a cache; nor should an answer
	// about one request's credential or a passing outage.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// The codes of the JSON error object the default ErrorHandler writes, beside
// headers.ErrorCode of a denial.
const (
	codeKeyMissing  = "rate_limit_key_missing"
	codeUnavailable = "rate_limit_unavailable"
	codeError       = "rate_limit_error"
)

// errorBody is the JSON body of the default answers that have no rate-limit
// fields: the error object of headers.ErrorBody without its numbers, which
// would read as a quota of 0.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// answerError is the default ErrorHandler, for a request of plan p (nil
// when it has none); see Options.ErrorHandler.
func (m *middleware) answerError(w http.ResponseWriter, r *http.Request, p *plan, err error) {
	switch {
	case errors.Is(err, ErrNoKey):
		if m.o.Challenge != "" {
			w.Header().Set("WWW-Authenticate", m.o.Challenge)
		}
		m.writeError(w, http.StatusUnauthorized, codeKeyMissing, "The request carries no credential to rate-limit it by.")
	case errors.Is(err, floodgate.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		m.answerUnavailable(w, p)
	default:
		m.writeError(w, http.StatusInternalServerError, codeError, "The rate limit could not be applied.")
	}
}

// answerUnavailable writes the 503 of a decision that could not be made:
// every policy of p, nothing remaining until Retry-After, and a body that
// says the same.
func (m *middleware) answerUnavailable(w http.ResponseWriter, p *plan) {
	var reps [maxLimits]headers.Report
	if p != nil {
		for i, pol := range p.policies {
			reps[i] = headers.Report{Policy: pol, Denied: true, RetryAfter: m.o.UnavailableRetryAfter}
		}
		m.writeReports(w.Header(), p, reps[:len(p.policies)])
	} else {
		// No plan to report, which serve never asks for (ErrNoKey and
		// ErrUnknownPlan are not unavailability): Retry-After alone.
		reps[0] = headers.Report{Denied: true, RetryAfter: m.o.UnavailableRetryAfter}
		_ = headers.WriteReports(w.Header(), 0, reps[:1], nil)
	}
	rep := reps[0]
	s := rep.RetryAfterSeconds()
	unit := " seconds."
	if s == 1 {
		unit = " second."
	}
	msg := "The rate limit could not be decided; retry after " + strconv.FormatInt(s, 10) + unit
	if m.o.ProblemDetails {
		writeProblem(w, http.StatusServiceUnavailable, msg)
		return
	}
	body := headers.NewErrorBody(rep)
	body.Error.Code, body.Error.Message = codeUnavailable, msg
	writeJSON(w, headers.ContentTypeJSON, http.StatusServiceUnavailable, body)
}

// writeError writes an answer without rate-limit fields.
func (m *middleware) writeError(w http.ResponseWriter, status int, code, msg string) {
	if m.o.ProblemDetails {
		writeProblem(w, status, msg)
		return
	}
	writeJSON(w, headers.ContentTypeJSON, status, errorBody{Error: errorDetail{Code: code, Message: msg}})
}

// writeProblem writes problem details of type about:blank (RFC 9457 section
// 4.2.1): the status says it all, and the title is its text. The RateLimit
// draft's temporary-reduced-capacity type, a 503's, names the policies a
// request violated; a request no limiter could decide violated none.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, headers.ContentTypeProblem, status, headers.Problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail,
	})
}

// printableASCII reports whether s holds only printable ASCII and spaces.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// sleep waits for d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
