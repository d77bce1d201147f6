package grpclimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/client"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientOptions configures NewClient. A nil *ClientOptions, like the zero
// value, means the defaults of package client's Transport: up to 4
// attempts, backoff from 100ms capped at 10s per wait and 30s in all, a
// retry budget of 10 tokens refilled by 0.1 per success, and no retry of
// ResourceExhausted without a RetryInfo. NewClient copies the options.
type ClientOptions struct {
	// MaxAttempts is the most times one call is sent, the first included.
	// The default is 4; 1 disables retries.
	MaxAttempts int

	// BaseDelay and MaxDelay shape the wait before a retry, as
	// client.Options' do (client.RetryDelay): before retry n (0 for the
	// first) a call that the server gave a RetryInfo of h waits h plus a
	// uniformly random time in [0, min(MaxDelay, max(BaseDelay·2^n,
	// 500ms, h/10))), never less than h; one without waits a uniformly
	// random time in [0, min(MaxDelay, BaseDelay·2^n)). The defaults are
	// 100ms and 10s.
	BaseDelay time.Duration
	MaxDelay  time.Duration

	// MaxWait bounds the total time one call spends waiting between
	// attempts. A retry whose wait would exceed it, or pass the call
	// context's deadline, is not made: the call returns the last status.
	// The random part added to a RetryInfo is trimmed to what MaxWait
	// leaves, so it never costs a retry the server's wait fits. The
	// default is 30s.
	MaxWait time.Duration

	// RetryBudget bounds the retries of all the calls through the
	// interceptor together, as client.Options.RetryBudget does for HTTP
	// (gRFC A6's retry throttling): a call refused with Unavailable, or
	// with ResourceExhausted without a RetryInfo when RetryWithoutInfo is
	// set, spends a token; a call the server answered on its merits gives
	// back TokenRatio. A ResourceExhausted with a RetryInfo neither spends
	// nor needs it: the server is pacing the client through its quota,
	// and MaxAttempts and MaxWait bound those retries. The default, nil,
	// is client.RetryBudget{}'s: MaxTokens 10, TokenRatio 0.1.
	RetryBudget *client.RetryBudget

	// DisableRetryBudget removes the retry budget. WARNING: against an
	// overloaded server every client then multiplies its load by up to
	// MaxAttempts. It cannot be combined with RetryBudget.
	DisableRetryBudget bool

	// RetryWithoutInfo retries a ResourceExhausted that carries no
	// RetryInfo, after the full-jitter backoff and within the retry
	// budget. The default is false: such a status may mean a quota that
	// does not come back soon (a daily quota, a message too large), and
	// gRPC's status codes guide says not to retry it blindly.
	RetryWithoutInfo bool

	// StreamBuffer bounds the bytes of the messages a stream keeps to send
	// again on a retry (see Client.Stream): a stream whose messages exceed
	// it is not retried. The default is 256 KiB, grpc's own retry buffer
	// per call; a negative value is an error.
	StreamBuffer int

	// Rand is the source of the jitter; set it to a seeded generator for
	// reproducible tests. The interceptor serialises its use. The default
	// is the math/rand/v2 global source.
	Rand *rand.Rand
}

// Client is a gRPC client interceptor that retries calls a server refused
// for a rate or concurrency limit, at the time the server named and never
// sooner. Its Unary method is a grpc.UnaryClientInterceptor and its Stream
// method a grpc.StreamClientInterceptor:
//
//	c, _ := grpclimit.NewClient(nil)
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(c.Unary),
//		grpc.WithChainStreamInterceptor(c.Stream), ...)
//
// A call is retried when it ends with:
//
//   - ResourceExhausted with a google.rpc.RetryInfo (as the interceptors of
//     this package send): after the RetryInfo's delay plus jitter, outside
//     the retry budget;
//   - Unavailable with a RetryInfo (an adaptive or in-flight limit that
//     answers Unavailable, a store that failed): after its delay plus
//     jitter, within the retry budget, as a failure of the server;
//   - ResourceExhausted without a RetryInfo, only with
//     ClientOptions.RetryWithoutInfo: after the full-jitter backoff, within
//     the budget.
//
// Any other status, and Unavailable without a RetryInfo (a broken
// connection, after which the server may have acted on the call), is
// returned as it is: gRPC's own retry policy (the service config's
// retryPolicy, which also honours grpc-retry-pushback-ms) is the tool for
// those. Do not enable both for the same codes, or their attempts
// multiply.
//
// Every call and stream through a Client shares its retry budget. A
// stream is retried only until the client receives a message of it, and
// sends the messages it had sent again (see Stream). Create one with
// NewClient; the zero value is not usable. It is safe for concurrent use.
type Client struct {
	maxAttempts         int
	baseDelay, maxDelay time.Duration
	maxWait             time.Duration
	budget              *client.RetryBucket // nil: DisableRetryBudget
	retryWithoutInfo    bool
	streamBuffer        int

	randMu sync.Mutex
	rand   *rand.Rand // nil: the global source
}

// NewClient returns a Client configured by opts (nil means the defaults),
// or an error matching floodgate.ErrInvalidConfig when an option is out of
// range.
func NewClient(opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	c := &Client{
		maxAttempts: o.MaxAttempts, baseDelay: o.BaseDelay, maxDelay: o.MaxDelay, maxWait: o.MaxWait,
		retryWithoutInfo: o.RetryWithoutInfo, streamBuffer: o.StreamBuffer, rand: o.Rand,
	}
	switch {
	case c.streamBuffer < 0:
		return nil, fmt.Errorf("%w: StreamBuffer = %d, want at least 0", floodgate.ErrInvalidConfig, c.streamBuffer)
	case c.streamBuffer == 0:
		c.streamBuffer = defaultStreamBuffer
	}
	switch {
	case c.maxAttempts < 0:
		return nil, fmt.Errorf("%w: MaxAttempts = %d, want at least 1", floodgate.ErrInvalidConfig, c.maxAttempts)
	case c.maxAttempts == 0:
		c.maxAttempts = 4
	}
	if c.baseDelay == 0 {
		c.baseDelay = 100 * time.Millisecond
	}
	if c.maxDelay == 0 {
		c.maxDelay = 10 * time.Second
	}
	if c.maxWait == 0 {
		c.maxWait = 30 * time.Second
	}
	if c.baseDelay < 0 || c.maxDelay < c.baseDelay || c.maxWait < 0 {
		return nil, fmt.Errorf("%w: want 0 < BaseDelay (%v) <= MaxDelay (%v) and MaxWait (%v) >= 0",
			floodgate.ErrInvalidConfig, c.baseDelay, c.maxDelay, c.maxWait)
	}
	switch {
	case o.DisableRetryBudget && o.RetryBudget != nil:
		return nil, fmt.Errorf("%w: RetryBudget and DisableRetryBudget are both set", floodgate.ErrInvalidConfig)
	case !o.DisableRetryBudget:
		var rb client.RetryBudget
		if o.RetryBudget != nil {
			rb = *o.RetryBudget
		}
		b, err := client.NewRetryBucket(rb)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", floodgate.ErrInvalidConfig, err)
		}
		c.budget = b
	}
	return c, nil
}

// RetryTokens returns the tokens left in the retry budget, between 0 and
// MaxTokens; calls may be retried while it is above MaxTokens/2. It is 0
// with DisableRetryBudget.
func (c *Client) RetryTokens() float64 {
	if c.budget == nil {
		return 0
	}
	return c.budget.Tokens()
}

// Unary is a grpc.UnaryClientInterceptor that retries as Client describes.
// Each attempt sends req anew; the reply of the last attempt is the
// call's.
func (c *Client) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var waited time.Duration
	for attempt := 0; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			c.success()
			return nil
		}
		delay, ok := c.next(ctx, err, attempt, waited)
		if !ok {
			return err
		}
		if serr := sleep(ctx, delay); serr != nil {
			return status.FromContextError(serr).Err()
		}
		waited += delay
	}
}

// next decides whether a call whose attempt (0 for the first) failed with
// err, having waited before it, is tried again: it returns the wait before
// the next attempt, or false when err is the call's. It spends or gives
// back retry tokens as Client describes.
func (c *Client) next(ctx context.Context, err error, attempt int, waited time.Duration) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, false // the caller's context ended: not the server's doing
	}
	st, _ := status.FromError(err)
	code := st.Code()
	hint := retryInfo(st)
	var retry bool
	switch {
	case code == codes.ResourceExhausted && hint > 0:
		// The server is pacing the client through its quota: no budget
		// spent or needed.
		retry = true
	case code == codes.Unavailable && hint > 0,
		code == codes.ResourceExhausted && c.retryWithoutInfo:
		// spend comes first: a failed attempt costs a token even when
		// no retry follows.
		retry = c.spend()
	default:
		if answered(code) {
			c.success()
		}
	}
	if !retry || attempt+1 >= c.maxAttempts {
		return 0, false
	}
	delay := client.RetryDelay(attempt, hint, c.baseDelay, c.maxDelay, c.float64())
	if hint > 0 {
		// The jitter on top of the server's wait is ours to give up:
		// trim it to what MaxWait leaves rather than forgo a retry the
		// server's own wait fits.
		delay = min(delay, max(hint, c.maxWait-waited))
	}
	if waited+delay > c.maxWait {
		return 0, false
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= delay {
		// The retry would start at or after the deadline: it could not
		// finish, and the server would see a call nobody waits for.
		return 0, false
	}
	return delay, true
}

// retryInfo returns the retry delay of st's google.rpc.RetryInfo, or 0
// when it has none, or one that is not positive.
func retryInfo(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0
			}
			return max(ri.GetRetryDelay().AsDuration(), 0)
		}
	}
	return 0
}

// answered reports whether a status says that the server answered the call
// on its merits, which gives back a share of a retry token as a success
// does (A6 counts every response that is not a failure it would retry).
func answered(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return false
}

func (c *Client) success() {
	if c.budget != nil {
		c.budget.Success()
	}
}

// spend records a failed attempt in the retry budget and reports whether a
// retry may follow.
func (c *Client) spend() bool {
	return c.budget == nil || c.budget.Failure()
}

func (c *Client) float64() float64 {
	if c.rand == nil {
		return rand.Float64()
	}
	c.randMu.Lock()
	defer c.randMu.Unlock()
	return c.rand.Float64()
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
