package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
)

// Options configures a Transport. A nil *Options, like the zero value, means
// the defaults: up to 4 attempts with full-jitter backoff from 100ms, capped
// at 10s per wait and 30s in all, a retry budget of 10 tokens that successes
// refill by 0.1 (about one retry per ten successes once the backend fails;
// a 429 that names a wait is retried outside it), no client-side limiter,
// no adaptive throttling. NewTransport copies what it needs; the Options
// may be reused.
type Options struct {
	// Limiter, when set, throttles the client before the server has to:
	// each attempt, retries included, waits on Limiter.Wait(ctx, key, 1)
	// before it is sent. Its errors (the context's deadline too near, for
	// one) are returned by RoundTrip.
	Limiter *floodgate.Limiter

	// Key returns the Limiter key of a request. The default is the
	// request's host (URL.Host), so each server gets its own quota.
	Key func(r *http.Request) string

	// MaxAttempts is the most times one request is sent, the first
	// included. The default is 4; 1 disables retries.
	MaxAttempts int

	// BaseDelay and MaxDelay shape the backoff: before retry n (0 for the
	// first) the Transport waits a uniformly random time in
	// [0, min(MaxDelay, BaseDelay·2^n)). When the server asks for a wait
	// h (Retry-After, or the t of an exhausted RateLimit policy), the
	// Transport waits h plus a uniformly random time in [0, s), where
	// s = min(MaxDelay, max(BaseDelay·2^n, 500ms, h/10)): never earlier
	// than asked, and clients told the same instant do not all return at
	// that instant. The defaults are 100ms and 10s.
	BaseDelay time.Duration
	MaxDelay  time.Duration

	// MaxWait bounds the total time one request spends waiting between
	// attempts. A retry whose wait would exceed it, or pass the request
	// context's deadline, is not made: RoundTrip returns the last response
	// instead. The random part added to a server's wait is trimmed to what
	// MaxWait leaves, so it never costs a retry the server's wait fits.
	// The default is 30s.
	MaxWait time.Duration

	// RetryBudget bounds the retries of all the Transport's requests
	// together (see RetryBudget), so that a failing backend is not sent
	// MaxAttempts times its load: 503 responses, broken connections and
	// 429 responses that name no wait spend it. A 429 that names a wait
	// (Retry-After above 0, or the t of an exhausted RateLimit policy)
	// neither spends it nor needs it: the server is pacing the client
	// through its quota, and a retry at the time it named is how the
	// request gets served; MaxAttempts and MaxWait bound those retries.
	// A client that keeps exceeding a quota it knows should still pace
	// itself with Limiter, which spares the refused attempts. The
	// default, nil, is the budget RetryBudget{} describes: MaxTokens 10,
	// TokenRatio 0.1.
	RetryBudget *RetryBudget

	// DisableRetryBudget removes the retry budget: every request retries
	// up to MaxAttempts whatever the others met. WARNING: against an
	// overloaded backend every client then multiplies its load by up to
	// MaxAttempts, the retry storm the budget prevents. It cannot be
	// combined with RetryBudget.
	DisableRetryBudget bool

	// Throttle enables adaptive throttling (see ThrottleOptions). The
	// default, nil, disables it.
	Throttle *ThrottleOptions

	// Rand is the source of the backoff jitter and of the throttling
	// draws; set it to a seeded generator for reproducible tests. The
	// Transport serialises its use. The default is the math/rand/v2
	// global source.
	Rand *rand.Rand

	// Now is the clock of the throttling window and of header parsing.
	// The default is time.Now.
	Now func() time.Time
}

// Transport is an http.RoundTripper that throttles, retries and backs off on
// behalf of its callers. Wrap a base transport with NewTransport and put it in
// an http.Client:
//
//	t, err := client.NewTransport(http.DefaultTransport, nil)
//	c := &http.Client{Transport: t}
//
// RoundTrip retries a response with status 429 Too Many Requests or 503
// Service Unavailable, but only a request it can send again unchanged: an
// idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or a request
// whose body can be replayed (GetBody, which http.NewRequest sets for
// in-memory bodies); a request whose body cannot be rewound is never
// retried. Those statuses mean the server refused the work, so replaying a
// POST is safe. A connection error is retried only for an idempotent
// method, or a request with an Idempotency-Key header: the server may have
// acted on a POST before the connection broke.
//
// The wait before a retry is the full-jitter backoff, or, when the server
// asks for a wait, that wait plus a random spread (see Options.BaseDelay):
// Retry-After (delta seconds or an HTTP-date measured from the response's
// Date), else the t of an exhausted RateLimit policy; Retry-After takes
// precedence over t, as the RateLimit draft requires. The server's wait is
// a lower bound; the spread keeps clients refused together from retrying
// together, since both fields count whole seconds. A Retry-After beyond a
// day, or beyond what MaxWait or the context deadline leaves, ends the
// retries: the caller gets the response and decides.
//
// Retries also draw on the Transport's retry budget (Options.RetryBudget),
// shared by all its requests: when too many attempts fail, a request that
// fails is returned after its first attempt, until successes refill the
// budget. A 429 that names a wait is the exception: it is the server pacing
// the client, not failing, and is retried at the time it named whatever the
// budget holds, within MaxAttempts and MaxWait.
//
// A Transport is safe for concurrent use by multiple goroutines; create it
// with NewTransport (the zero value is not usable).
type Transport struct {
	base        http.RoundTripper
	limiter     *floodgate.Limiter
	key         func(*http.Request) string
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	maxWait     time.Duration
	throttle    *throttle
	budget      *retryBudget // nil: DisableRetryBudget
	now         func() time.Time
	sleep       func(ctx context.Context, d time.Duration) error // the wait between attempts; tests replace it

	randMu sync.Mutex
	rand   *rand.Rand // nil: the global source

	stateMu sync.Mutex
	state   headers.State
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that sends requests through base
// (http.DefaultTransport when nil), configured by opts (nil means the
// defaults). It fails when an option is out of range.
func NewTransport(base http.RoundTripper, opts *Options) (*Transport, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{
		base: base, limiter: o.Limiter, key: o.Key,
		maxAttempts: o.MaxAttempts, baseDelay: o.BaseDelay, maxDelay: o.MaxDelay, maxWait: o.MaxWait,
		now: o.Now, rand: o.Rand, sleep: sleep,
	}
	if t.key == nil {
		t.key = func(r *http.Request) string { return r.URL.Host }
	}
	if t.now == nil {
		t.now = time.Now
	}
	switch {
	case t.maxAttempts < 0:
		return nil, fmt.Errorf("client: MaxAttempts = %d, want at least 1", t.maxAttempts)
	case t.maxAttempts == 0:
		t.maxAttempts = 4
	}
	if t.baseDelay == 0 {
		t.baseDelay = 100 * time.Millisecond
	}
	if t.maxDelay == 0 {
		t.maxDelay = 10 * time.Second
	}
	if t.maxWait == 0 {
		t.maxWait = 30 * time.Second
	}
	if t.baseDelay < 0 || t.maxDelay < t.baseDelay || t.maxWait < 0 {
		return nil, fmt.Errorf("client: want 0 < BaseDelay (%v) <= MaxDelay (%v) and MaxWait (%v) >= 0",
			t.baseDelay, t.maxDelay, t.maxWait)
	}
	switch {
	case o.DisableRetryBudget && o.RetryBudget != nil:
		return nil, errors.New("client: RetryBudget and DisableRetryBudget are both set")
	case !o.DisableRetryBudget:
		var rb RetryBudget
		if o.RetryBudget != nil {
			rb = *o.RetryBudget
		}
		b, err := newRetryBudget(rb)
		if err != nil {
			return nil, err
		}
		t.budget = b
	}
	if o.Throttle != nil {
		th, err := newThrottle(*o.Throttle)
		if err != nil {
			return nil, err
		}
		t.throttle = th
	}
	return t, nil
}

// State returns the rate-limit state of the last response the Transport
// received (from any request; with concurrent requests, the latest to
// arrive), as headers.Parse read it. It is the zero State before the first
// response.
func (t *Transport) State() headers.State {
	t.stateMu.Lock()
	defer t.stateMu.Unlock()
	return t.state
}

// RejectProbability returns the probability with which adaptive throttling
// currently rejects a request, 0 when throttling is disabled.
func (t *Transport) RejectProbability() float64 {
	if t.throttle == nil {
		return 0
	}
	return t.throttle.rejectProbability(t.now())
}

// RetryTokens returns the tokens left in the retry budget (see RetryBudget),
// between 0 and MaxTokens; requests may be retried while it is above
// MaxTokens/2. It is +Inf when DisableRetryBudget is set.
func (t *Transport) RetryTokens() float64 {
	if t.budget == nil {
		return math.Inf(1)
	}
	return t.budget.level()
}

// CloseIdleConnections closes the idle connections of the base transport
// when it supports it; http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// spend records a failed attempt in the retry budget and reports whether the
// request may be retried.
func (t *Transport) spend() bool {
	return t.budget == nil || t.budget.failure()
}

func (t *Transport) float64() float64 {
	if t.rand == nil {
		return rand.Float64()
	}
	t.randMu.Lock()
	defer t.randMu.Unlock()
	return t.rand.Float64()
}

// RoundTrip sends req, retrying as the Transport's documentation describes.
// Like every RoundTripper it does not modify req and closes its body.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	idempotent := isIdempotent(req)
	retryStatus := replayable && (idempotent || req.GetBody != nil)
	retryConnErr := replayable && (idempotent || req.Header.Get("Idempotency-Key") != "")

	var waited time.Duration
	for attempt := 0; ; attempt++ {
		r := req
		if attempt > 0 {
			var err error
			if r, err = rewind(req); err != nil {
				return nil, err
			}
		}
		resp, tk, sent, err := t.send(ctx, r)
		if !sent {
			return nil, err
		}
		final := attempt+1 >= t.maxAttempts
		var delay, hint time.Duration
		if err != nil {
			if t.throttle != nil {
				t.throttle.done(tk, false, ctx.Err() != nil)
			}
			if ctx.Err() != nil || !isConnError(err) {
				return nil, err // not the backend's failure: the budget is untouched
			}
			// spend comes first: a failed attempt costs a token even
			// when no retry follows.
			if !t.spend() || final || !retryConnErr {
				return nil, err
			}
			delay = backoff(attempt, t.baseDelay, t.maxDelay, t.float64())
		} else {
			st, _ := headers.Parse(resp.Header, &headers.ParseOptions{Now: t.now})
			t.stateMu.Lock()
			t.state = st
			t.stateMu.Unlock()
			throttled := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
			if t.throttle != nil {
				t.throttle.done(tk, !throttled, false)
			}
			if !throttled {
				if t.budget != nil && resp.StatusCode < 500 {
					t.budget.success()
				}
				return resp, nil
			}
			var ok bool
			hint, ok = retryHint(resp.Header, st)
			// A 429 that names a wait is the server pacing the client
			// through its quota, not a backend failing: it neither
			// spends the retry budget nor needs it. MaxAttempts and
			// MaxWait still bound its retries, and each waits at least
			// what the server named, so a server that answers 429
			// forever sees at most MaxAttempts attempts per request,
			// one per named wait.
			paced := resp.StatusCode == http.StatusTooManyRequests && (hint > 0 || !ok)
			if (!paced && !t.spend()) || final || !retryStatus || !ok {
				return resp, nil
			}
			delay = retryDelay(attempt, hint, t.baseDelay, t.maxDelay, t.float64())
		}
		if hint > 0 {
			// The jitter on top of the server's wait is ours to give up:
			// trim it to what MaxWait leaves rather than forgo a retry
			// the server's own wait fits.
			delay = min(delay, max(hint, t.maxWait-waited))
		}
		if waited+delay > t.maxWait {
			return resp, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
			return resp, err
		}
		if resp != nil {
			discard(resp.Body)
		}
		if err := t.sleep(ctx, delay); err != nil {
			return nil, err
		}
		waited += delay
	}
}

// send makes one attempt: the client-side limiter, adaptive throttling, then
// the base transport. sent is false when the request was not sent; err then
// says why, and r's body has been closed.
func (t *Transport) send(ctx context.Context, r *http.Request) (resp *http.Response, tk ticket, sent bool, err error) {
	if t.limiter != nil {
		if err := t.limiter.Wait(ctx, t.key(r), 1); err != nil {
			closeBody(r)
			return nil, ticket{}, false, fmt.Errorf("client: waiting on the limiter: %w", err)
		}
	}
	if t.throttle != nil {
		var p float64
		var ok bool
		if tk, p, ok = t.throttle.admit(t.now(), t.float64()); !ok {
			closeBody(r)
			return nil, ticket{}, false, &ThrottledError{Probability: p}
		}
	}
	resp, err = t.base.RoundTrip(r)
	return resp, tk, true, err
}

// retryHint returns how long the server asked to wait, and false when it
// asked for an absurd wait (a Retry-After beyond headers.DefaultMaxRetryAfter)
// that no retry should honour.
func retryHint(h http.Header, st headers.State) (time.Duration, bool) {
	if v := h.Values(headers.FieldRetryAfter); len(v) > 0 {
		d, err := headers.ParseRetryAfter(v[0], st.Date)
		switch {
		case errors.Is(err, headers.ErrRange) || (err == nil && d > headers.DefaultMaxRetryAfter):
			return 0, false
		case err == nil:
			return d, true
		}
		// A malformed Retry-After is ignored; fall back to t.
	}
	if age, err := strconv.ParseInt(h.Get("Age"), 10, 64); err == nil && age > 0 {
		// From a cache: its RateLimit fields describe the past.
		return 0, true
	}
	st.HasRetryAfter = false
	return st.Wait(), true
}

func isIdempotent(r *http.Request) bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// rewind returns a copy of req with a fresh body for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return r, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("client: rewinding the request body: %w", err)
	}
	r.Body = body
	return r, nil
}

// isConnError reports whether err is a failure to connect or a broken
// connection, as opposed to a bad request, a TLS verification failure or a
// cancelled context.
func isConnError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return false
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// discard drains a little of a response body, so the connection can be
// reused, and closes it.
func discard(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
