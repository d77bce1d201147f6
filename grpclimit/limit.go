package grpclimit

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// CostFunc returns the units a call, or a message of a stream, costs. For
// a unary call msg is the request; for a stream it is each message the
// server receives (see Options.Cost). It must be safe for concurrent use.
type CostFunc func(ctx context.Context, fullMethod string, msg any) int64

// Options configures New. A nil *Options means the defaults: every call
// costs 1 unit of its peer address's quota (KeyByPeer), the ratelimit and
// ratelimit-policy fields go in the response header of every decided call,
// and a denial is codes.ResourceExhausted with RetryInfo, QuotaFailure and
// grpc-retry-pushback-ms. The zero value means the same. New copies the
// options; the functions they hold are called concurrently and must be
// safe for concurrent use.
type Options struct {
	// Key names the quota a call draws from. The default is KeyByPeer:
	// the peer's IP address (IPv6 grouped by /64). Combine key functions
	// with KeyChain; give each method its own quota with KeyWithMethod. A
	// call for which Key finds no key is not counted and is refused with
	// codes.Unauthenticated (ErrNoKey).
	Key KeyFunc

	// Cost returns the units a unary call costs, given its request; the
	// default is 1 per call. Opening a stream costs 1 unit; with Cost set,
	// every message the server receives on a stream costs Cost units of
	// the same key as well, decided when RecvMsg has read it (a denied
	// message makes RecvMsg return the denial's status error, which the
	// handler returns). A cost below 1 or above the limiter's quota is an
	// error (floodgate.ErrInvalidN, floodgate.ErrExceedsLimit): the call
	// is refused with codes.Internal and OnError sees the error.
	Cost CostFunc

	// Skip exempts the calls it returns true for (health checks,
	// reflection): they reach the handler without a decision and without
	// fields. The default exempts nothing.
	Skip func(ctx context.Context, fullMethod string) bool

	// PolicyNames names the limiter's policies in the ratelimit fields and
	// in QuotaFailure's subject, as httplimit.Options.PolicyNames does:
	// one name for a single algorithm, one per limit of a floodgate.Limits
	// in its order; distinct and printable ASCII. By default a single
	// algorithm's policy is DefaultPolicyName and a Limits' limits are
	// named "<quota>-per-<window>" ("5-per-1s").
	PolicyNames []string

	// OmitFields sends no ratelimit or ratelimit-policy metadata. Denials
	// still carry RetryInfo and grpc-retry-pushback-ms. The default is
	// false.
	OmitFields bool

	// DenialFieldsInTrailer sends a denial's ratelimit fields in the
	// trailer, beside grpc-retry-pushback-ms, instead of the header, so
	// that the denial is a trailers-only response. gRPC's own retry policy
	// (a retryPolicy in the client's service config, in every gRPC
	// implementation: gRFC A6) retries only such responses: a call whose
	// response carried a header is committed, and by default this
	// package's denials carry the fields in one, so a client's retry
	// policy never retries them, pushback or not (TestNativeRetryPolicy).
	// This package's Client retries them either way. The default is false:
	// the fields go in the header of every decided call, as HTTP sends
	// them with a 429.
	DenialFieldsInTrailer bool

	// UnavailableRetryAfter is the RetryInfo of a call refused with
	// codes.Unavailable because the limiter's store failed (an error
	// matching floodgate.ErrUnavailable, after the store's own failure
	// policy). The default is 1 second; a negative value is an error.
	UnavailableRetryAfter time.Duration

	// OnDecision, when set, is called with every decision, on the call's
	// goroutine, before the call is served or refused. It must not block.
	OnDecision func(ctx context.Context, fullMethod, key string, d floodgate.Decision)

	// OnError, when set, is called with every call no decision could be
	// made for (no key, a failed store, an invalid cost, an ended
	// context), before it is refused. It must not block.
	OnError func(ctx context.Context, fullMethod, key string, err error)
}

// defaultUnavailableRetryAfter is the default of UnavailableRetryAfter.
const defaultUnavailableRetryAfter = time.Second

// Interceptor limits the calls of a gRPC server with a *floodgate.Limiter:
// its Unary and Stream methods are a grpc.UnaryServerInterceptor and a
// grpc.StreamServerInterceptor, and its Limit method satisfies
// go-grpc-middleware's ratelimit.Limiter. Create one with New; the zero
// value is not usable. It is safe for concurrent use.
type Interceptor struct {
	lim  *floodgate.Limiter
	o    Options
	pols *policies
	// each is a pool of buffers receiving every limit's Decision of a
	// floodgate.Limits: Apply's each escapes through the Store interface,
	// so a stack array would be moved to the heap on every call.
	each sync.Pool
}

// New returns an Interceptor that limits calls with lim, configured by
// opts (nil means the defaults; see Options). It returns an error matching
// floodgate.ErrInvalidConfig when lim is nil or not made by floodgate.New,
// or an option is unusable: every configuration error is reported here,
// never on a call.
//
// Install both methods, so that unary calls and streams draw from one
// quota:
//
//	lim, _ := grpclimit.New(limiter, nil)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary),
//		grpc.ChainStreamInterceptor(lim.Stream),
//	)
func New(lim *floodgate.Limiter, opts *Options) (*Interceptor, error) {
	i := &Interceptor{lim: lim}
	if opts != nil {
		i.o = *opts
	}
	o := &i.o
	if o.PolicyNames != nil {
		o.PolicyNames = slices.Clone(o.PolicyNames)
	}
	if o.Key == nil {
		o.Key = KeyByPeer
	}
	var err error
	if o.UnavailableRetryAfter, err = unavailableRetryAfter(o.UnavailableRetryAfter); err != nil {
		return nil, err
	}
	if i.pols, err = newPolicies(lim, o.PolicyNames); err != nil {
		return nil, err
	}
	i.each.New = func() any { return new([maxLimits]floodgate.Decision) }
	return i, nil
}

// Unary is a grpc.UnaryServerInterceptor. Each call not skipped costs
// Options.Cost units (1 by default) of its key's quota. An admitted call
// reaches the handler, and the ratelimit fields go in the response header
// when the handler returns (sent then with grpc.SendHeader, so that a
// handler's own grpc.SetHeader metadata goes with them; a handler that
// sends the header itself, with grpc.SendHeader, sends it without them).
// A denied call never reaches the handler: it gets the denial's status
// (see New), its fields in the header (in the trailer with
// Options.DenialFieldsInTrailer) and grpc-retry-pushback-ms in the
// trailer.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	o := &i.o
	if o.Skip != nil && o.Skip(ctx, method) {
		return handler(ctx, req)
	}
	n := int64(1)
	if o.Cost != nil {
		n = o.Cost(ctx, method, req)
	}
	md, wait, err := i.decide(ctx, method, n)
	if err != nil {
		i.setRefusal(ctx, md, wait)
		return nil, err
	}
	resp, err := handler(ctx, req)
	if md != nil {
		// After the handler, so that the header is sent once, with
		// whatever the handler set: grpc.SetHeader would copy md into
		// a new map (metadata.Join) on every call, while SendHeader
		// of a header the handler left empty takes md as it is.
		_ = grpc.SendHeader(ctx, md)
	}
	return resp, err
}

// Stream is a grpc.StreamServerInterceptor. Opening a stream not skipped
// costs 1 unit of its key's quota: an admitted stream reaches the handler
// with the ratelimit fields set in its header (sent with the first
// message or the status); a denied one never does, and gets the status,
// header and trailer Unary gives a denial. With Options.Cost set, every
// message the handler receives costs Cost units too (see Options.Cost);
// the fields of those decisions are not sent, since the header has
// usually gone by then, but a denial's status carries its RetryInfo and
// the trailer its pushback.
func (i *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := info.FullMethod
	o := &i.o
	ctx := ss.Context()
	if o.Skip != nil && o.Skip(ctx, method) {
		return handler(srv, ss)
	}
	md, wait, err := i.decide(ctx, method, 1)
	if err != nil {
		hdr, trl := i.refusalMetadata(md, wait)
		if hdr != nil {
			_ = ss.SetHeader(hdr)
		}
		if trl != nil {
			ss.SetTrailer(trl)
		}
		return err
	}
	if md != nil {
		_ = ss.SetHeader(md)
	}
	if o.Cost != nil {
		ss = &costStream{ServerStream: ss, i: i, method: method}
	}
	return handler(srv, ss)
}

// Limit decides one call of the method of ctx (grpc.Method) on a server,
// at Options.Cost(ctx, method, nil) units (1 without Cost), and returns nil
// when it is admitted, or the status error Unary would return. It sets the
// ratelimit fields in the call's header (grpc.SetHeader; a denial's in its
// trailer with Options.DenialFieldsInTrailer) and, on a denial, the
// pushback in its trailer, where ctx is a server call's.
//
// Its signature is that of go-grpc-middleware's ratelimit.Limiter, so an
// *Interceptor plugs into that package's interceptors. They replace the
// error with a status of their own text, without its RetryInfo and
// QuotaFailure; the header fields and the pushback trailer still reach the
// client. Prefer Unary and Stream, which keep them.
func (i *Interceptor) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	n := int64(1)
	if i.o.Cost != nil {
		n = i.o.Cost(ctx, method, nil)
	}
	md, wait, err := i.decide(ctx, method, n)
	if err == nil {
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		return nil
	}
	i.setRefusal(ctx, md, wait)
	return err
}

// setRefusal sets the header and the trailer of the refused unary call of
// ctx (see refusalMetadata).
func (i *Interceptor) setRefusal(ctx context.Context, md metadata.MD, wait time.Duration) {
	hdr, trl := i.refusalMetadata(md, wait)
	if hdr != nil {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if trl != nil {
		_ = grpc.SetTrailer(ctx, trl)
	}
}

// refusalMetadata returns the header and the trailer of a refused call
// whose fields are md and whose RetryInfo is wait (0 for none): the
// fields in the header, or with DenialFieldsInTrailer in the trailer,
// and the pushback in the trailer. Either may be nil.
func (i *Interceptor) refusalMetadata(md metadata.MD, wait time.Duration) (hdr, trl metadata.MD) {
	if wait > 0 {
		trl = pushback(wait)
	}
	switch {
	case md == nil:
	case !i.o.DenialFieldsInTrailer:
		hdr = md
	case trl == nil:
		trl = md
	default:
		maps.Copy(trl, md)
	}
	return hdr, trl
}

// decide takes n units of the key of a call of method. It returns the
// call's ratelimit fields (nil with OmitFields, or when no decision was
// made) and nil when the call is admitted, or the status error that
// refuses it and, when that status carries a RetryInfo, its wait for the
// pushback trailer.
func (i *Interceptor) decide(ctx context.Context, method string, n int64) (md metadata.MD, wait time.Duration, err error) {
	o := &i.o
	key, ok := o.Key(ctx, method)
	if !ok || key == "" {
		return nil, 0, i.fail(ctx, method, "", ErrNoKey)
	}
	p := i.pols
	var buf *[maxLimits]floodgate.Decision
	var each []floodgate.Decision
	var d floodgate.Decision
	if p.composite {
		buf = i.each.Get().(*[maxLimits]floodgate.Decision)
		each = buf[:len(p.list)]
		clear(each) // a limiter that does not fill it leaves zeros, not another call's decisions
		var res floodgate.Result
		res, err = i.lim.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, each)
		d = res.Decision
	} else {
		d, err = i.lim.AllowN(ctx, key, n)
	}
	if err != nil {
		if buf != nil {
			i.each.Put(buf)
		}
		return nil, unavailableWait(err, o.UnavailableRetryAfter), i.fail(ctx, method, key, err)
	}
	if o.OnDecision != nil {
		o.OnDecision(ctx, method, key, d)
	}
	var reps [maxLimits]headers.Report
	nrep := p.reports(&reps, d, each)
	if buf != nil {
		i.each.Put(buf)
	}
	if !o.OmitFields {
		md = p.metadata(reps[:nrep])
	}
	if d.Allowed {
		return md, 0, nil
	}
	wait = RetryDelay(d.RetryAfter)
	pol := reps[0].Policy
	msg := "grpclimit: rate limit exceeded (policy " + pol.Name + "); retry after " + wait.String()
	return md, wait, denial(codes.ResourceExhausted, msg, wait, pol.Name, i.lim.Name(), d.Limit).Err()
}

// fail reports err to OnError and returns the status error that refuses
// the call.
func (i *Interceptor) fail(ctx context.Context, method, key string, err error) error {
	if i.o.OnError != nil {
		i.o.OnError(ctx, method, key, err)
	}
	return errorStatus(err, i.o.UnavailableRetryAfter).Err()
}

// costStream charges every message a stream's handler receives.
type costStream struct {
	grpc.ServerStream
	i      *Interceptor
	method string
}

// RecvMsg receives a message and takes its cost; a denial, or a call no
// decision could be made for, is returned as RecvMsg's error.
func (s *costStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx := s.Context()
	n := s.i.o.Cost(ctx, s.method, m)
	_, wait, err := s.i.decide(ctx, s.method, n)
	if wait > 0 {
		s.SetTrailer(pushback(wait))
	}
	return err
}
