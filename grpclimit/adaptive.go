package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// AdaptiveOptions configures NewAdaptive. A nil *AdaptiveOptions means the
// defaults: every call through Acquire without a partition, a rejection
// answered with codes.Unavailable and a RetryInfo of 1 second, and the
// outcome of a call read from its context. The zero value means the same.
// NewAdaptive copies the options; the functions they hold are called
// concurrently and must be safe for concurrent use.
type AdaptiveOptions struct {
	// Partition returns the partition of a call (a Partition's Name or
	// one of the adaptive Class constants). The default sends every call
	// through Acquire, with no partition.
	Partition func(ctx context.Context, fullMethod string) string

	// Skip exempts the calls it returns true for. The default exempts
	// nothing.
	Skip func(ctx context.Context, fullMethod string) bool

	// Code is the status code of a rejection: codes.Unavailable (the
	// default; this server is overloaded, as HTTP's 503, which clients
	// and load balancers may retry elsewhere) or codes.ResourceExhausted.
	// Any other code is an error. Netflix's concurrency-limits answers
	// Unavailable; ResourceExhausted tells a client its own rate is the
	// problem, which an adaptive limit cannot know.
	Code codes.Code

	// RetryAfter is the RetryInfo and grpc-retry-pushback-ms of a
	// rejection, rounded up to 1 ms. A slot frees as soon as any call
	// ends, so no exact time exists: it is a hint. The default is 1
	// second, as adaptive.Middleware's Retry-After; a negative value is
	// an error.
	RetryAfter time.Duration

	// Outcome decides how an admitted call is reported to the Limiter
	// once its handler returned, given the handler's error (nil for
	// success). The default reports a call whose deadline has passed as
	// Dropped (so that loss-based limits back off), a call whose context
	// was cancelled before its deadline as Ignore (its latency means
	// nothing), and every other call as Success, whatever its status:
	// return Dropped for statuses that mean overload, such as the
	// handler's own Unavailable when a dependency is saturated; any value
	// but Success and Dropped counts as Ignore. A handler (or an Outcome)
	// that panics is reported as Ignore and the panic goes on.
	Outcome func(ctx context.Context, fullMethod string, err error) adaptive.Outcome
}

// AdaptivePolicy is the policy name QuotaFailure's violation gives an
// adaptive rejection (its subject; its quota_id is empty, since an
// adaptive.Limiter does not tell its name, and its quota_value is the
// limit at the rejection).
const AdaptivePolicy = "adaptive"

// AdaptiveInterceptor limits the concurrency of a gRPC server with an
// *adaptive.Limiter, whose limit follows the latency of the calls it
// admits. Its Unary and Stream methods are server interceptors. Create
// one with NewAdaptive; the zero value is not usable. It is safe for
// concurrent use.
type AdaptiveInterceptor struct {
	lim *adaptive.Limiter
	o   AdaptiveOptions
}

// NewAdaptive returns an AdaptiveInterceptor over lim, configured by opts
// (nil means the defaults; see AdaptiveOptions), or an error matching
// floodgate.ErrInvalidConfig when lim is nil or not made by
// adaptive.NewLimiter, or an option is unusable.
func NewAdaptive(lim *adaptive.Limiter, opts *AdaptiveOptions) (*AdaptiveInterceptor, error) {
	if lim == nil || lim.Limit() < 1 {
		return nil, fmt.Errorf("%w: an adaptive.Limiter made by adaptive.NewLimiter is needed", floodgate.ErrInvalidConfig)
	}
	i := &AdaptiveInterceptor{lim: lim}
	if opts != nil {
		i.o = *opts
	}
	o := &i.o
	var err error
	if o.Code, err = rejectCode(o.Code, codes.Unavailable); err != nil {
		return nil, err
	}
	switch {
	case o.RetryAfter < 0:
		return nil, fmt.Errorf("%w: negative RetryAfter %v", floodgate.ErrInvalidConfig, o.RetryAfter)
	case o.RetryAfter == 0:
		o.RetryAfter = time.Second
	}
	o.RetryAfter = RetryDelay(o.RetryAfter)
	if o.Outcome == nil {
		o.Outcome = defaultOutcome
	}
	return i, nil
}

// defaultOutcome is AdaptiveOptions.Outcome's default. A call whose
// deadline has passed is Dropped whatever ended its context: the client
// gives up at its deadline too, and its cancellation (RST_STREAM) may
// reach the server before the server's own timer fires, which leaves the
// context Canceled rather than DeadlineExceeded. A cancellation that
// arrives before the server's deadline (which runs behind the client's
// by the time the call took to arrive) is Ignore: the server cannot tell
// it from a client that went away.
func defaultOutcome(ctx context.Context, _ string, _ error) adaptive.Outcome {
	err := ctx.Err()
	if err == nil {
		return adaptive.Success
	}
	if dl, ok := ctx.Deadline(); errors.Is(err, context.DeadlineExceeded) || ok && !time.Now().Before(dl) {
		return adaptive.Dropped
	}
	return adaptive.Ignore
}

// Unary is a grpc.UnaryServerInterceptor: an admitted call's handler runs
// and its outcome is reported when it returns; a rejected call never
// reaches the handler.
func (i *AdaptiveInterceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	method := info.FullMethod
	if i.o.Skip != nil && i.o.Skip(ctx, method) {
		return handler(ctx, req)
	}
	tok, wait, err := i.acquire(ctx, method)
	if err != nil {
		if wait > 0 {
			_ = grpc.SetTrailer(ctx, pushback(wait))
		}
		return nil, err
	}
	// The deferred Ignore runs only if the handler or Outcome panics:
	// recovering and re-panicking would lose the original stack.
	ended := false
	defer func() {
		if !ended {
			tok.Ignore()
		}
	}()
	resp, err = handler(ctx, req)
	o := i.outcome(ctx, method, err)
	ended = true
	i.end(&tok, o)
	return resp, err
}

// Stream is a grpc.StreamServerInterceptor: a stream counts as one call in
// flight from its start until its handler returns.
func (i *AdaptiveInterceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	method := info.FullMethod
	if i.o.Skip != nil && i.o.Skip(ctx, method) {
		return handler(srv, ss)
	}
	tok, wait, err := i.acquire(ctx, method)
	if err != nil {
		if wait > 0 {
			ss.SetTrailer(pushback(wait))
		}
		return err
	}
	ended := false
	defer func() {
		if !ended {
			tok.Ignore()
		}
	}()
	err = handler(srv, ss)
	o := i.outcome(ctx, method, err)
	ended = true
	i.end(&tok, o)
	return err
}

// acquire admits a call of method, or returns the status error that
// rejects it and the wait of its RetryInfo (0 when it has none).
func (i *AdaptiveInterceptor) acquire(ctx context.Context, method string) (adaptive.Token, time.Duration, error) {
	var tok adaptive.Token
	var err error
	if i.o.Partition != nil {
		tok, err = i.lim.AcquirePartition(ctx, i.o.Partition(ctx, method))
	} else {
		tok, err = i.lim.Acquire(ctx)
	}
	switch {
	case err == nil:
		return tok, 0, nil
	case errors.Is(err, adaptive.ErrLimitExceeded):
		limit := int64(i.lim.Limit())
		wait := i.o.RetryAfter
		msg := "grpclimit: concurrency limit exceeded (limit " + strconv.FormatInt(limit, 10) + "); retry after " + wait.String()
		return tok, wait, denial(i.o.Code, msg, wait, AdaptivePolicy, "", limit).Err()
	default:
		// The context ended while the call waited for a slot (WaitFIFO,
		// WaitLIFO): its status is the context's.
		return tok, 0, errorStatus(err, 0).Err()
	}
}

// outcome returns how an admitted call of method, whose handler returned
// err, is reported: Options.Outcome's answer, where any value but Success
// and Dropped counts as Ignore.
func (i *AdaptiveInterceptor) outcome(ctx context.Context, method string, err error) adaptive.Outcome {
	switch o := i.o.Outcome(ctx, method, err); o {
	case adaptive.Success, adaptive.Dropped:
		return o
	}
	return adaptive.Ignore
}

// end ends tok with o.
func (i *AdaptiveInterceptor) end(tok *adaptive.Token, o adaptive.Outcome) {
	switch o {
	case adaptive.Success:
		tok.Success()
	case adaptive.Dropped:
		tok.Dropped()
	default:
		tok.Ignore()
	}
}
