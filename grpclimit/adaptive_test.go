package grpclimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/grpclimit"
)

// fixedAdaptive returns an adaptive.Limiter whose limit stays at limit.
func fixedAdaptive(t *testing.T, limit int) *adaptive.Limiter {
	t.Helper()
	f, err := adaptive.NewFixed(limit)
	require.NoError(t, err)
	lim, err := adaptive.NewLimiter(f, nil)
	require.NoError(t, err)
	return lim
}

func TestAdaptiveRejectionCodes(t *testing.T) {
	for _, code := range []codes.Code{0, codes.Unavailable, codes.ResourceExhausted} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			lim := fixedAdaptive(t, 1)
			icpt, err := grpclimit.NewAdaptive(lim, &grpclimit.AdaptiveOptions{Code: code, RetryAfter: 40*time.Millisecond + 1})
			require.NoError(t, err)
			svc := &service{started: make(chan struct{}, 1)}
			c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() { _, _ = c.EmptyCall(ctx, &testgrpc.Empty{}) }()
			<-svc.started // the one slot is in use

			var trl metadata.MD
			_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Trailer(&trl))
			st := status.Convert(err)
			want := code
			if want == 0 {
				want = codes.Unavailable // the default
			}
			require.Equal(t, want, st.Code(), "%v", err)
			ri, qf := details(t, st)
			assert.Equal(t, 41*time.Millisecond, ri.GetRetryDelay().AsDuration())
			assert.Equal(t, grpclimit.AdaptivePolicy, qf.GetViolations()[0].GetSubject())
			assert.EqualValues(t, 1, qf.GetViolations()[0].GetQuotaValue())
			assert.Equal(t, []string{"41"}, trl.Get("grpc-retry-pushback-ms"))
			assert.EqualValues(t, 0, svc.unary.Load())
			assert.EqualValues(t, 1, lim.Stats().Rejected)
		})
	}
}

func TestAdaptiveOutcomes(t *testing.T) {
	lim := fixedAdaptive(t, 10)
	icpt, err := grpclimit.NewAdaptive(lim, nil)
	require.NoError(t, err)
	svc := &service{started: make(chan struct{}, 1)}
	// deadline gives a call the deadline its "server-timeout" metadata
	// names, on the server: the client's own deadline may reach the
	// server as a cancellation before the server's timer fires, which
	// counts as Ignore.
	deadline := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "server-timeout"); len(v) > 0 {
			d, err := time.ParseDuration(v[0])
			if err != nil {
				return nil, err
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return h(ctx, req)
	}
	c := serve(t, svc, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(deadline, icpt.Unary), grpc.StreamInterceptor(icpt.Stream),
	})

	// A served call is a Success, a stream too.
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
	require.NoError(t, err)
	stream, err := c.StreamingInputCall(t.Context())
	require.NoError(t, err)
	_, err = stream.CloseAndRecv()
	require.NoError(t, err)

	// A call past its deadline is Dropped.
	_, err = c.EmptyCall(metadata.AppendToOutgoingContext(t.Context(), "server-timeout", "20ms"), &testgrpc.Empty{})
	require.Error(t, err)
	<-svc.started

	// A call its client cancelled is Ignored.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		<-svc.started
		cancel()
	}()
	_, err = c.EmptyCall(ctx, &testgrpc.Empty{})
	require.Equal(t, codes.Canceled, status.Code(err))

	// The server ends its calls shortly after their clients.
	require.Eventually(t, func() bool { return lim.InFlight() == 0 }, 30*time.Second, time.Millisecond)
	s := lim.Stats()
	assert.EqualValues(t, 2, s.Succeeded)
	assert.EqualValues(t, 1, s.Dropped)
	assert.EqualValues(t, 1, s.Ignored)
}

func TestAdaptiveOutcomeOption(t *testing.T) {
	lim := fixedAdaptive(t, 10)
	icpt, err := grpclimit.NewAdaptive(lim, &grpclimit.AdaptiveOptions{
		Outcome: func(_ context.Context, _ string, err error) adaptive.Outcome {
			if status.Code(err) == codes.Unimplemented {
				return adaptive.Dropped
			}
			return 7 // not an Outcome: Ignore
		},
	})
	require.NoError(t, err)
	c := serve(t, &service{}, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	_, err = c.UnimplementedCall(t.Context(), &testgrpc.Empty{})
	require.Equal(t, codes.Unimplemented, status.Code(err))
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
	require.NoError(t, err)
	s := lim.Stats()
	assert.EqualValues(t, 1, s.Dropped)
	assert.EqualValues(t, 1, s.Ignored)
	assert.EqualValues(t, 0, s.Succeeded)
}

func TestAdaptiveReleasesOnPanic(t *testing.T) {
	lim := fixedAdaptive(t, 1)
	icpt, err := grpclimit.NewAdaptive(lim, nil)
	require.NoError(t, err)
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	func() {
		defer func() { assert.Equal(t, "handler", recover()) }()
		_, _ = icpt.Unary(t.Context(), nil, info, func(context.Context, any) (any, error) { panic("handler") })
	}()
	assert.Zero(t, lim.InFlight())
	assert.EqualValues(t, 1, lim.Stats().Ignored)
}

func TestNewAdaptiveRefuses(t *testing.T) {
	lim := fixedAdaptive(t, 1)
	for name, tc := range map[string]struct {
		lim  *adaptive.Limiter
		opts *grpclimit.AdaptiveOptions
	}{
		"nil limiter":  {nil, nil},
		"zero limiter": {&adaptive.Limiter{}, nil},
		"code":         {lim, &grpclimit.AdaptiveOptions{Code: codes.Aborted}},
		"retry after":  {lim, &grpclimit.AdaptiveOptions{RetryAfter: -1}},
	} {
		_, err := grpclimit.NewAdaptive(tc.lim, tc.opts)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
}
