package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InflightOptions configures NewInflight. A nil *InflightOptions means the
// defaults: calls keyed by peer address (KeyByPeer), a slot held from the
// handler's start until it returns or the call's context ends, and a
// denial answered with codes.ResourceExhausted. The zero value means the
// same. NewInflight copies the options; the functions they hold are called
// concurrently and must be safe for concurrent use.
type InflightOptions struct {
	// Key names the limit a call counts against, as Options.Key does. The
	// default is KeyByPeer. A call for which Key finds no key is refused
	// with codes.Unauthenticated (ErrNoKey).
	Key KeyFunc

	// Skip exempts the calls it returns true for: they reach the handler
	// without taking a slot. The default exempts nothing.
	Skip func(ctx context.Context, fullMethod string) bool

	// Code is the status code of a denial: codes.ResourceExhausted (the
	// default: this caller has too many calls in flight, a limit of its
	// own, as httplimit.NewInflight answers 429) or codes.Unavailable (the
	// server is busy, which clients, proxies and gRPC's own retry policy
	// treat as a failure of this server and may retry elsewhere). Any
	// other code is an error. Either way the status carries RetryInfo and
	// QuotaFailure, and the trailer grpc-retry-pushback-ms, of the
	// inflight.Limiter's Options.RetryAfter rounded up to 1 ms.
	Code codes.Code

	// HoldUntilReturn keeps a slot until the handler returns, even when
	// the call's context ends first. By default the slot is released as
	// soon as the context ends (the client cancelled, the deadline
	// passed, the connection broke), so that a handler stuck past its
	// call frees its slot, as httplimit.NewInflight does. WARNING: without
	// it, a handler that ignores its context keeps running after its slot
	// is freed; set it for handlers that do not stop when their context
	// ends.
	HoldUntilReturn bool

	// ReleaseTimeout bounds the release of a slot. The release runs on
	// a context that keeps the call's values but not its end: the call's
	// own context has often ended (that is what released the slot), and
	// a release on it would itself be cancelled, leaving the slot held
	// until its hold expires (or, on an inflight.LocalStore, forever).
	// The default is 1 second; a negative value is an error.
	ReleaseTimeout time.Duration

	// UnavailableRetryAfter is the RetryInfo of a call refused with
	// codes.Unavailable because the store failed, as in Options. The
	// default is 1 second; a negative value is an error.
	UnavailableRetryAfter time.Duration

	// OnDecision, when set, is called with every decision before the
	// call is served or refused. It must not block.
	OnDecision func(ctx context.Context, fullMethod, key string, s inflight.Status)

	// OnError, when set, is called with every call no decision could be
	// made for, before it is refused, and with every release that failed
	// (the slot then frees when its hold expires). It must not block.
	OnError func(ctx context.Context, fullMethod, key string, err error)
}

// defaultReleaseTimeout is the default of InflightOptions.ReleaseTimeout.
const defaultReleaseTimeout = time.Second

// InflightPolicy is the subject of the QuotaFailure violation of an
// in-flight denial, as httplimit names the policy of its in-flight body.
const InflightPolicy = "inflight"

// InflightInterceptor lets at most a limit of calls of each key run at
// once on a gRPC server, with an *inflight.Limiter: its Unary and Stream
// methods are server interceptors. Create one with NewInflight; the zero
// value is not usable. It is safe for concurrent use.
type InflightInterceptor struct {
	lim *inflight.Limiter
	o   InflightOptions
}

// NewInflight returns an InflightInterceptor over lim, configured by opts
// (nil means the defaults; see InflightOptions), or an error matching
// floodgate.ErrInvalidConfig when lim is nil or not made by inflight.New,
// or an option is unusable.
//
// It sends no ratelimit fields: they describe a quota restored over a
// window, which a limit of calls in flight is not. Chain it after New's
// Interceptor, which does:
//
//	grpc.ChainUnaryInterceptor(rate.Unary, conc.Unary)
func NewInflight(lim *inflight.Limiter, opts *InflightOptions) (*InflightInterceptor, error) {
	if lim == nil {
		return nil, fmt.Errorf("%w: nil inflight limiter", floodgate.ErrInvalidConfig)
	}
	if lim.Limit() < 1 {
		// inflight.New refuses a limit below 1: this Limiter was not
		// made by it, and would fail on every call.
		return nil, fmt.Errorf("%w: an inflight.Limiter not made by inflight.New", floodgate.ErrInvalidConfig)
	}
	i := &InflightInterceptor{lim: lim}
	if opts != nil {
		i.o = *opts
	}
	o := &i.o
	if o.Key == nil {
		o.Key = KeyByPeer
	}
	var err error
	if o.Code, err = rejectCode(o.Code, codes.ResourceExhausted); err != nil {
		return nil, err
	}
	switch {
	case o.ReleaseTimeout < 0:
		return nil, fmt.Errorf("%w: negative ReleaseTimeout %v", floodgate.ErrInvalidConfig, o.ReleaseTimeout)
	case o.ReleaseTimeout == 0:
		o.ReleaseTimeout = defaultReleaseTimeout
	}
	if o.UnavailableRetryAfter, err = unavailableRetryAfter(o.UnavailableRetryAfter); err != nil {
		return nil, err
	}
	return i, nil
}

// Unary is a grpc.UnaryServerInterceptor: a call holds a slot of its key
// while its handler runs (see InflightOptions.HoldUntilReturn), and a call
// whose key has the limit in flight never reaches the handler. The slot is
// released when the handler returns, while a panic of the handler unwinds
// (the panic then goes on), and, unless HoldUntilReturn, when the call's
// context ends. A call whose context ended while its slot was taken never
// reaches the handler either: its slot is released at once and it gets its
// context's status.
func (i *InflightInterceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if i.o.Skip != nil && i.o.Skip(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	h, wait, err := i.acquire(ctx, info.FullMethod)
	if err != nil {
		if wait > 0 {
			_ = grpc.SetTrailer(ctx, pushback(wait))
		}
		return nil, err
	}
	defer h.release()
	if !i.o.HoldUntilReturn {
		stop := context.AfterFunc(ctx, h.release)
		defer stop()
	}
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor: a stream holds a slot of its
// key from its start until its handler returns or, unless HoldUntilReturn,
// its context ends, as Unary's calls do.
func (i *InflightInterceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if i.o.Skip != nil && i.o.Skip(ctx, info.FullMethod) {
		return handler(srv, ss)
	}
	h, wait, err := i.acquire(ctx, info.FullMethod)
	if err != nil {
		if wait > 0 {
			ss.SetTrailer(pushback(wait))
		}
		return err
	}
	defer h.release()
	if !i.o.HoldUntilReturn {
		stop := context.AfterFunc(ctx, h.release)
		defer stop()
	}
	return handler(srv, ss)
}

// held is a slot a call holds. Its release runs at most once, from the
// handler's return or from the end of the call's context, whichever comes
// first: Slot.Release is idempotent too, but each call of release makes a
// context and a timer.
type held struct {
	i      *InflightInterceptor
	ctx    context.Context // the call's
	method string
	key    string
	slot   inflight.Slot
	done   atomic.Bool
}

// release gives the slot back on a context that keeps the call's values
// but not its end, bounded by ReleaseTimeout, and reports a failure to
// OnError.
func (h *held) release() {
	if h.done.Swap(true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.i.o.ReleaseTimeout)
	defer cancel()
	if err := h.slot.Release(ctx); err != nil && h.i.o.OnError != nil {
		h.i.o.OnError(h.ctx, h.method, h.key, err)
	}
}

// acquire takes a slot for a call of method. It returns the slot, or the
// status error refusing the call and the wait of its RetryInfo, if any.
func (i *InflightInterceptor) acquire(ctx context.Context, method string) (*held, time.Duration, error) {
	o := &i.o
	key, ok := o.Key(ctx, method)
	if !ok || key == "" {
		return nil, 0, i.fail(ctx, method, "", ErrNoKey)
	}
	slot, err := i.lim.Acquire(ctx, key)
	if err != nil {
		return nil, unavailableWait(err, o.UnavailableRetryAfter), i.fail(ctx, method, key, err)
	}
	if o.OnDecision != nil {
		o.OnDecision(ctx, method, key, slot.Status)
	}
	if !slot.Allowed {
		wait := RetryDelay(slot.RetryAfter)
		msg := "grpclimit: too many calls in flight (limit " + strconv.FormatInt(slot.Limit, 10) + "); retry after " + wait.String()
		return nil, wait, denial(o.Code, msg, wait, InflightPolicy, i.lim.Name(), slot.Limit).Err()
	}
	h := &held{i: i, ctx: ctx, method: method, key: key, slot: slot}
	if err := ctx.Err(); err != nil {
		// The call ended while its slot was taken (a store that does I/O
		// may take a while): nobody waits for its answer.
		h.release()
		return nil, 0, status.FromContextError(err).Err()
	}
	return h, 0, nil
}

// fail reports err to OnError and returns the status error that refuses
// the call.
func (i *InflightInterceptor) fail(ctx context.Context, method, key string, err error) error {
	if i.o.OnError != nil {
		i.o.OnError(ctx, method, key, err)
	}
	return errorStatus(err, i.o.UnavailableRetryAfter).Err()
}
