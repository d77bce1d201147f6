package grpclimit_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
)

// details returns the RetryInfo and QuotaFailure of st, failing the test
// when either is missing.
func details(t *testing.T, st *status.Status) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	require.NotNil(t, ri, "status %v has no RetryInfo", st)
	require.NotNil(t, qf, "status %v has no QuotaFailure", st)
	return ri, qf
}

func TestUnaryDenialRetryInfo(t *testing.T) {
	// 3 per second: the wait for the next token is 333.333333ms, which
	// RetryInfo rounds up to 334ms.
	lim := fixedLimiter(t, floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 2}, nil)
	icpt, err := grpclimit.New(lim, nil)
	require.NoError(t, err)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	ctx := t.Context()

	for i := range 2 {
		var hdr metadata.MD
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
		require.NoError(t, err, "call %d", i+1)
		assert.Equal(t, []string{`"default";q=2;w=1`}, hdr.Get("ratelimit-policy"), "call %d", i+1)
		assert.Equal(t, []string{`"default";r=` + strconv.Itoa(1-i) + `;t=1`}, hdr.Get("ratelimit"), "call %d", i+1)
	}

	var hdr, trl metadata.MD
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "third call: %v", err)
	assert.EqualValues(t, 2, svc.unary.Load(), "calls that reached the handler")

	// The limiter's clock stands still and a denial changes no state, so
	// asking it again gives the Decision the call got.
	d, err := lim.Allow(ctx, "addr:bufconn")
	require.NoError(t, err)
	require.False(t, d.Allowed)
	want := grpclimit.RetryDelay(d.RetryAfter)
	assert.Equal(t, 334*time.Millisecond, want)

	ri, qf := details(t, st)
	assert.Equal(t, want, ri.GetRetryDelay().AsDuration(), "RetryInfo.retry_delay")
	require.Len(t, qf.GetViolations(), 1)
	v := qf.GetViolations()[0]
	assert.Equal(t, "default", v.GetSubject())
	assert.Equal(t, lim.Name(), v.GetQuotaId())
	assert.EqualValues(t, 2, v.GetQuotaValue())
	assert.Equal(t, []string{"334"}, trl.Get("grpc-retry-pushback-ms"))
	assert.Equal(t, []string{`"default";q=2;w=1`}, hdr.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"default";r=0;t=1`}, hdr.Get("ratelimit"))
}

func TestRetryDelayRoundsUp(t *testing.T) {
	for _, tt := range []struct{ in, want time.Duration }{
		{-time.Second, 0}, {0, 0}, {1, time.Millisecond}, {time.Millisecond, time.Millisecond},
		{time.Millisecond + 1, 2 * time.Millisecond}, {333333333, 334 * time.Millisecond},
		{1<<63 - 1, (1<<63 - 1) / time.Millisecond * time.Millisecond},
	} {
		assert.Equal(t, tt.want, grpclimit.RetryDelay(tt.in), "RetryDelay(%d)", tt.in)
	}
}

func TestUnaryLimitsFields(t *testing.T) {
	// Two limits decided as one: the fields list both, the binding one
	// first, as httplimit writes them.
	lim := fixedLimiter(t, floodgate.Limits{
		floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5},
		floodgate.FixedWindow{Limit: 3, Window: time.Minute},
	}, nil)
	icpt, err := grpclimit.New(lim, nil)
	require.NoError(t, err)
	c := serve(t, &service{}, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	ctx := t.Context()
	var hdr metadata.MD
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
	require.NoError(t, err)
	pol := hdr.Get("ratelimit-policy")
	require.Len(t, pol, 1)
	assert.Equal(t, `"3-per-1m";q=3;w=60, "5-per-1s";q=5;w=1`, pol[0])
	require.Len(t, hdr.Get("ratelimit"), 1)
	assert.Contains(t, hdr.Get("ratelimit")[0], `"3-per-1m";r=2;`)
	assert.Contains(t, hdr.Get("ratelimit")[0], `"5-per-1s";r=4;`)

	for range 2 {
		_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		require.NoError(t, err)
	}
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	_, qf := details(t, st)
	assert.Equal(t, "3-per-1m", qf.GetViolations()[0].GetSubject(), "the binding limit")
}

func TestUnaryNoKeyAndBadCost(t *testing.T) {
	lim := fixedLimiter(t, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}, nil)
	var errs []error
	icpt, err := grpclimit.New(lim, &grpclimit.Options{
		Key: grpclimit.KeyByMetadata("x-api-key"),
		Cost: func(_ context.Context, _ string, msg any) int64 {
			return int64(msg.(*testgrpc.SimpleRequest).GetResponseSize())
		},
		OnError: func(_ context.Context, method, _ string, err error) {
			assert.Equal(t, "/grpc.testing.TestService/UnaryCall", method)
			errs = append(errs, err) // the calls below are sequential
		},
	})
	require.NoError(t, err)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	ctx := t.Context()

	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "no API key: %v", err)

	keyed := metadata.AppendToOutgoingContext(ctx, "x-api-key", "secret")
	_, err = c.UnaryCall(keyed, &testgrpc.SimpleRequest{ResponseSize: 0})
	assert.Equal(t, codes.Internal, status.Code(err), "cost 0: %v", err)
	_, err = c.UnaryCall(keyed, &testgrpc.SimpleRequest{ResponseSize: 11})
	assert.Equal(t, codes.Internal, status.Code(err), "cost above the quota: %v", err)
	_, err = c.UnaryCall(keyed, &testgrpc.SimpleRequest{ResponseSize: 10})
	assert.NoError(t, err, "cost of the whole quota")
	_, err = c.UnaryCall(keyed, &testgrpc.SimpleRequest{ResponseSize: 1})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))

	require.Len(t, errs, 3)
	assert.ErrorIs(t, errs[0], grpclimit.ErrNoKey)
	assert.ErrorIs(t, errs[1], floodgate.ErrInvalidN)
	assert.ErrorIs(t, errs[2], floodgate.ErrExceedsLimit)
	assert.EqualValues(t, 1, svc.unary.Load())
}

func TestUnarySkipAndOmitFields(t *testing.T) {
	lim := fixedLimiter(t, floodgate.FixedWindow{Limit: 1, Window: time.Second}, nil)
	icpt, err := grpclimit.New(lim, &grpclimit.Options{
		OmitFields: true,
		Skip:       func(_ context.Context, m string) bool { return m == "/grpc.testing.TestService/EmptyCall" },
	})
	require.NoError(t, err)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	var hdr metadata.MD
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
	require.NoError(t, err)
	assert.Empty(t, hdr.Get("ratelimit"))
	assert.Empty(t, hdr.Get("ratelimit-policy"))
	var trl metadata.MD
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Trailer(&trl))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.NotEmpty(t, trl.Get("grpc-retry-pushback-ms"), "a denial keeps its pushback without fields")

	// EmptyCall is skipped: it reaches the handler whatever the quota.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.EmptyCall(ctx, &testgrpc.Empty{})
	assert.Equal(t, codes.Canceled, status.Code(err))
}

// failingStore is a floodgate.Store whose every step fails, as a store
// that lost its backend does under floodgate.FailError.
type failingStore struct{}

func (failingStore) Bind(string, floodgate.Algorithm) (floodgate.Bound, error) {
	return failingStore{}, nil
}

func (failingStore) Apply(context.Context, string, floodgate.Request, []floodgate.Decision) (floodgate.Result, error) {
	return floodgate.Result{}, fmt.Errorf("%w: backend down", floodgate.ErrUnavailable)
}

func (failingStore) Take(context.Context, string, int64) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: backend down", floodgate.ErrUnavailable)
}

func TestUnaryStoreUnavailable(t *testing.T) {
	lim, err := floodgate.New(failingStore{}, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, nil)
	require.NoError(t, err)
	icpt, err := grpclimit.New(lim, &grpclimit.Options{UnavailableRetryAfter: 1500*time.Millisecond + 1})
	require.NoError(t, err)
	c := serve(t, &service{}, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	var trl metadata.MD
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Trailer(&trl))
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code())
	assert.NotContains(t, st.Message(), "backend down", "the store's error stays on the server")
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		if d, ok := d.(*errdetails.RetryInfo); ok {
			ri = d
		}
	}
	require.NotNil(t, ri)
	assert.Equal(t, 1501*time.Millisecond, ri.GetRetryDelay().AsDuration())
	assert.Equal(t, []string{"1501"}, trl.Get("grpc-retry-pushback-ms"))
}

func TestStreamOpenAndMessages(t *testing.T) {
	// 4 units: the open of a stream costs 1, each message its payload's
	// length.
	lim := fixedLimiter(t, floodgate.FixedWindow{Limit: 4, Window: time.Minute}, nil)
	icpt, err := grpclimit.New(lim, &grpclimit.Options{
		Cost: func(_ context.Context, _ string, msg any) int64 {
			return int64(len(msg.(*testgrpc.StreamingInputCallRequest).GetPayload().GetBody()))
		},
	})
	require.NoError(t, err)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.StreamInterceptor(icpt.Stream)})
	ctx := t.Context()
	msg := func(n int) *testgrpc.StreamingInputCallRequest {
		return &testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, n)}}
	}

	stream, err := c.StreamingInputCall(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(msg(1)))
	require.NoError(t, stream.Send(msg(1)))
	require.NoError(t, stream.Send(msg(2))) // 1 + 1 + 1 + 2 > 4: denied on receipt
	_, err = stream.CloseAndRecv()
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "third message: %v", err)
	details(t, st)
	trl := stream.Trailer()
	assert.NotEmpty(t, trl.Get("grpc-retry-pushback-ms"))
	hdr, err := stream.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=4;w=60`}, hdr.Get("ratelimit-policy"), "the open's fields")
	assert.EqualValues(t, 2, svc.messages.Load(), "messages the handler got")

	// One unit is left: a stream opens with it, and its first message of
	// cost 1 is denied.
	stream, err = c.StreamingInputCall(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(msg(1)))
	_, err = stream.CloseAndRecv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 2, svc.messages.Load())

	// Nothing is left: the next stream is denied at its open, with the
	// RetryInfo of the limiter's decision.
	stream, err = c.StreamingInputCall(ctx)
	require.NoError(t, err)
	_, err = stream.CloseAndRecv()
	st = status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code())
	d, err := lim.Allow(ctx, "addr:bufconn")
	require.NoError(t, err)
	ri, _ := details(t, st)
	assert.Equal(t, grpclimit.RetryDelay(d.RetryAfter), ri.GetRetryDelay().AsDuration())
	hdr, err = stream.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=0;t=60`}, hdr.Get("ratelimit"))
}

func TestStreamWithoutCostIsLimitedAtOpenOnly(t *testing.T) {
	lim := fixedLimiter(t, floodgate.FixedWindow{Limit: 1, Window: time.Minute}, nil)
	icpt, err := grpclimit.New(lim, nil)
	require.NoError(t, err)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.StreamInterceptor(icpt.Stream)})
	stream, err := c.StreamingInputCall(t.Context())
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, stream.Send(&testgrpc.StreamingInputCallRequest{}))
	}
	_, err = stream.CloseAndRecv()
	require.NoError(t, err)
	assert.EqualValues(t, 10, svc.messages.Load())
	stream, err = c.StreamingInputCall(t.Context())
	require.NoError(t, err)
	_, err = stream.CloseAndRecv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}
