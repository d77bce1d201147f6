package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
)

// ErrNoKey reports a request for which the middleware's key function found
// no key.
var ErrNoKey = errors.New("httplimit: no rate-limit key for the request")

// DefaultPolicyName is the policy name the middleware advertises in the
// RateLimit and RateLimit-Policy fields unless told otherwise.
const DefaultPolicyName = "default"

// Options configures New and Middleware. A nil *Options means the defaults:
// every request costs 1 unit of its client address's quota, denials get 429
// with the IETF fields, Retry-After and a JSON body. The zero value means the
// same. New copies the options: later changes to them have no effect, but the
// functions they hold are called concurrently and must be safe for
// concurrent use.
type Options struct {
	// Key names the quota a request draws from. The default is KeyByIP
	// with the four options below: the client address, IPv6 grouped by
	// /64, no proxy trusted. Combine key functions with KeyChain.
	Key KeyFunc

	// TrustedProxies, ForwardedHeader, IPv4Prefix and IPv6Prefix configure
	// the default key, as the IPKeyOptions fields of the same names do.
	// They are an error when Key is set: configure KeyByIP there instead.
	TrustedProxies  []netip.Prefix
	ForwardedHeader string
	IPv4Prefix      int
	IPv6Prefix      int

	// KeyPrefix is prepended to every key, so that routes sharing a
	// limiter's store keep separate quotas ("search:", "upload:"). The
	// default is none.
	KeyPrefix string

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
	// Retry-After is sent. Use it to see what a new limit would do before
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
	// and OpRefund where the algorithm allows, as Limiter.Wait does (the
	// token bucket and the windows give them back; a leaky bucket's
	// departure slots are promised and stay taken). A limiter the user
	// wraps keeps this as long as its Apply forwards to the one it wraps.
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

	// PolicyName is the policy name of the RateLimit fields. The default
	// is DefaultPolicyName. It must be printable ASCII.
	PolicyName string

	// ProblemDetails makes the default denial body RFC 9457 problem details
	// (application/problem+json, type quota-exceeded, violated-policies)
	// instead of floodgate's JSON error object. The default is false.
	ProblemDetails bool

	// DenyHandler writes the response to a denied request. When it runs,
	// the rate-limit fields and Retry-After are already set on
	// w.Header(). The default writes 429 Too Many Requests with the JSON
	// body described in package headers.
	DenyHandler func(w http.ResponseWriter, r *http.Request, d floodgate.Decision)

	// ErrorHandler writes the response when no decision could be made: the
	// limiter failed (an error matching floodgate.ErrUnavailable, after the
	// store's own failure policy: FailOpen and FailLocal stores return
	// decisions, not errors), no key was found (ErrNoKey), the cost was
	// invalid, the request's context ended, or the options are invalid
	// (floodgate.ErrInvalidConfig, see Middleware). The default answers 503
	// Service Unavailable for floodgate.ErrUnavailable and ended contexts
	// and 500 Internal Server Error otherwise, with no rate-limit fields.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// OnDecision, when set, is called with every decision before the
	// request is served or denied, in shadow mode too. It runs on the
	// request's goroutine and must not block.
	OnDecision func(r *http.Request, key string, d floodgate.Decision)

	// Now is the clock of epoch resets (headers.ResetEpoch). The default
	// is time.Now.
	Now func() time.Time
}

// middleware is a validated Options bound to a floodgate.Limiter.
type middleware struct {
	lim      floodgate.Limiter
	o        Options
	policy   headers.Policy
	style    headers.Style
	shaping  bool
	writeOpt headers.WriteOptions
}

// New returns net/http middleware that limits requests with limiter,
// configured by opts (nil means the defaults; see Options), or an error
// matching floodgate.ErrInvalidConfig when the limiter is nil or the options
// are unusable.
//
// For each request not skipped it finds the key, asks the limiter for the
// request's cost, reports the decision in rate-limit fields and either
// calls the next handler (after the decision's delay, when shaping) or
// answers 429 with Retry-After and a JSON body.
//
// The middleware uses only the floodgate.Limiter interface: any Limiter
// works, a user's wrapper included.
func New(limiter floodgate.Limiter, opts *Options) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(limiter, opts)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}, nil
}

// Middleware is New without the error: it returns the same middleware when
// New succeeds.
//
// Middleware never panics: when the limiter is nil or the options are
// invalid it returns middleware that hands every request to the
// ErrorHandler with an error matching floodgate.ErrInvalidConfig (500 by
// default), failing closed. Use New to catch such errors at start-up.
func Middleware(limiter floodgate.Limiter, opts *Options) func(http.Handler) http.Handler {
	mw, err := New(limiter, opts)
	if err == nil {
		return mw
	}
	onError := defaultErrorHandler
	if opts != nil && opts.ErrorHandler != nil {
		onError = opts.ErrorHandler
	}
	return func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			onError(w, r, err)
		})
	}
}

func newMiddleware(lim floodgate.Limiter, opts *Options) (*middleware, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: nil limiter", floodgate.ErrInvalidConfig)
	}
	m := &middleware{lim: lim}
	if opts != nil {
		m.o = *opts
	}
	o := &m.o
	ipOpts := IPKeyOptions{
		TrustedProxies: o.TrustedProxies, ForwardedHeader: o.ForwardedHeader,
		IPv4Prefix: o.IPv4Prefix, IPv6Prefix: o.IPv6Prefix,
	}
	switch {
	case o.Key == nil:
		o.Key = KeyByIP(&ipOpts)
	case ipOpts.TrustedProxies != nil || ipOpts.ForwardedHeader != "" || ipOpts.IPv4Prefix != 0 || ipOpts.IPv6Prefix != 0:
		return nil, fmt.Errorf("%w: TrustedProxies, ForwardedHeader, IPv4Prefix and IPv6Prefix configure the default key; with Key set, pass them to KeyByIP", floodgate.ErrInvalidConfig)
	}
	if o.PolicyName == "" {
		o.PolicyName = DefaultPolicyName
	}
	if o.DenyHandler == nil {
		if o.ProblemDetails {
			o.DenyHandler = m.denyProblem
		} else {
			o.DenyHandler = m.denyJSON
		}
	}
	if o.ErrorHandler == nil {
		o.ErrorHandler = defaultErrorHandler
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
	p := lim.Policy()
	m.policy = headers.Policy{Name: o.PolicyName, Quota: fieldCount(p.Quota), Window: fieldDuration(p.Window)}
	if p.Quota < 0 || p.Window < 0 {
		// No Limiter of this module reports one; a wrapper that does is
		// broken.
		return nil, fmt.Errorf("%w: negative policy %+v", floodgate.ErrInvalidConfig, p)
	}
	if _, err := headers.FormatPolicy(m.policy); err != nil {
		return nil, fmt.Errorf("%w: policy cannot be advertised: %w", floodgate.ErrInvalidConfig, err)
	}
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
		o.ErrorHandler(w, r, ErrNoKey)
		return
	}
	key = o.KeyPrefix + key
	n := int64(1)
	if o.Cost != nil {
		n = o.Cost(r)
	}

	ctx := r.Context()
	var d floodgate.Decision
	var err error
	var refund func() // gives back a delayed admission that is not served
	if m.shaping {
		maxDelay := o.MaxDelay
		if deadline, ok := ctx.Deadline(); ok {
			maxDelay = max(0, min(maxDelay, time.Until(deadline)))
		}
		// Apply rather than Reserve: its Result tells the instant of the
		// admission, which a refund needs.
		var res floodgate.Result
		res, err = m.lim.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n, MaxDelay: maxDelay})
		d = res.Decision
		if err == nil && res.Allowed && res.Delay > 0 {
			refund = func() {
				// On a context that outlives the request's; a failed refund
				// only leaves the units spent.
				req := floodgate.Request{Op: floodgate.OpRefund, N: n, At: res.At.Add(res.Delay)}
				_, _ = m.lim.Apply(context.WithoutCancel(ctx), key, req)
			}
		}
	} else {
		d, err = m.lim.AllowN(ctx, key, n)
	}
	if err != nil {
		o.ErrorHandler(w, r, err)
		return
	}
	if o.OnDecision != nil {
		o.OnDecision(r, key, d)
	}

	m.writeFields(w.Header(), d)
	if o.Shadow {
		next.ServeHTTP(w, r)
		return
	}
	if !d.Allowed {
		o.DenyHandler(w, r, d)
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
			o.ErrorHandler(w, r, err)
			return
		}
	}
	next.ServeHTTP(w, r)
}

// rateLimitFields are every field writeFields may set.
var rateLimitFields = []string{
	headers.FieldRateLimitPolicy, headers.FieldRateLimit,
	headers.FieldRateLimitLimit, headers.FieldRateLimitRemaining, headers.FieldRateLimitReset,
	headers.FieldXRateLimitLimit, headers.FieldXRateLimitRemaining, headers.FieldXRateLimitReset,
	headers.FieldRetryAfter,
}

// report converts a decision into the terms of package headers, in the
// range the fields carry (see fieldCount and fieldDuration), so that every
// decision can be written and the body agrees with the fields.
func (m *middleware) report(d floodgate.Decision) headers.Report {
	pol := m.policy
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

// writeFields sets the rate-limit fields of d, and Retry-After on an
// enforced denial. The report is in range, so Write cannot fail on it; the
// policy name was checked by New.
func (m *middleware) writeFields(h http.Header, d floodgate.Decision) {
	rep := m.report(d)
	opts := m.writeOpt
	if m.o.XReset == headers.ResetEpoch {
		opts.Now = m.o.Now()
	}
	_ = headers.Write(h, m.style, rep, &opts)
	if m.o.Shadow {
		// Nothing is denied in a dry run; t still tells when the
		// request would have been admitted.
		h.Del(headers.FieldRetryAfter)
	}
}

func (m *middleware) denyJSON(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
	writeJSON(w, headers.ContentTypeJSON, http.StatusTooManyRequests, headers.NewErrorBody(m.report(d)))
}

func (m *middleware) denyProblem(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
	writeJSON(w, headers.ContentTypeProblem, http.StatusTooManyRequests, headers.NewProblem(m.report(d)))
}

func writeJSON(w http.ResponseWriter, contentType string, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// The body types hold strings and integers only.
		http.Error(w, http.StatusText(status), status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	// RFC 6585: a 429 must not be stored by a cache.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func defaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, floodgate.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
	}
	http.Error(w, http.StatusText(status), status)
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
