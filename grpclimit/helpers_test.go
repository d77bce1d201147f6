package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// t0 is the fixed instant of the tests' store clocks.
var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// fixedLimiter returns a limiter of alg on a memstore whose clock stands
// still at t0 (advanced by *now when now is not nil), so that a test can
// ask the limiter for the very Decision a call got.
func fixedLimiter(t testing.TB, alg floodgate.Algorithm, now *atomic.Int64) *floodgate.Limiter {
	t.Helper()
	clock := func() time.Time {
		if now == nil {
			return t0
		}
		return t0.Add(time.Duration(now.Load()))
	}
	store, err := memstore.New(&memstore.Options{Now: clock})
	require.NoError(t, err)
	lim, err := floodgate.New(store, alg, nil)
	require.NoError(t, err)
	return lim
}

// service is the test service: UnaryCall answers at once, StreamingInputCall
// reads every message and answers with the sum of their payload sizes,
// StreamingOutputCall sends a message of each size asked, FullDuplexCall
// echoes every message, EmptyCall blocks until its context ends.
type service struct {
	testgrpc.UnimplementedTestServiceServer
	unary    atomic.Int64  // UnaryCall calls that reached the handler
	messages atomic.Int64  // messages StreamingInputCall and FullDuplexCall received
	streams  atomic.Int64  // streams that reached a streaming handler
	started  chan struct{} // EmptyCall reports each start here when not nil
}

func (s *service) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.unary.Add(1)
	return &testgrpc.SimpleResponse{}, nil
}

func (s *service) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	if s.started != nil {
		s.started <- struct{}{}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *service) StreamingInputCall(stream grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	s.streams.Add(1)
	var sum int32
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: sum})
		}
		if err != nil {
			return err
		}
		s.messages.Add(1)
		sum += int32(len(m.GetPayload().GetBody()))
	}
}

func (s *service) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	s.streams.Add(1)
	for _, p := range req.GetResponseParameters() {
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	return nil
}

func (s *service) FullDuplexCall(stream grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	s.streams.Add(1)
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.messages.Add(1)
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: m.GetPayload()}); err != nil {
			return err
		}
	}
}

// serve starts a server with opts and svc on an in-memory listener and
// returns a client of it; both stop when the test ends.
func serve(t testing.TB, svc testgrpc.TestServiceServer, sopts []grpc.ServerOption, copts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(sopts...)
	testgrpc.RegisterTestServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	copts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, copts...)
	cc, err := grpc.NewClient("passthrough:///bufconn", copts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return testgrpc.NewTestServiceClient(cc)
}
