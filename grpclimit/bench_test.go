package grpclimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// benchLimiter returns a limiter on a memstore with the wall clock whose
// quota no benchmark exhausts, so that every decision admits.
func benchLimiter(b testing.TB) *floodgate.Limiter {
	b.Helper()
	store, err := memstore.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1 << 40, Per: time.Hour, Burst: 1 << 40}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

// transportStream is a grpc.ServerTransportStream that keeps nothing, as
// the real one keeps a header the handler left empty: SendHeader takes
// the metadata as it is, without copying it.
type transportStream struct{}

func (transportStream) Method() string               { return "/grpc.testing.TestService/UnaryCall" }
func (transportStream) SetHeader(metadata.MD) error  { return nil }
func (transportStream) SendHeader(metadata.MD) error { return nil }
func (transportStream) SetTrailer(metadata.MD) error { return nil }

// serverContext returns the context of a server call from 192.0.2.1.
func serverContext() context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 50000}})
	return grpc.NewContextWithServerTransportStream(ctx, transportStream{})
}

// BenchmarkInterceptorUnary measures the interceptor's own cost: a bare
// decision (lim.Allow of the key KeyByPeer finds) against Unary around a
// handler that does nothing, with the default options (KeyByPeer, the
// ratelimit fields).
func BenchmarkInterceptorUnary(b *testing.B) {
	lim := benchLimiter(b)
	ctx := serverContext()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d, err := lim.Allow(ctx, "ip:192.0.2.1"); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	for _, bc := range []struct {
		name string
		opts *grpclimit.Options
	}{
		{"interceptor", nil},
		{"interceptor/omitfields", &grpclimit.Options{OmitFields: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			icpt, err := grpclimit.New(lim, bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
			handler := func(context.Context, any) (any, error) { return nil, nil }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := icpt.Unary(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchService answers UnaryCall, after a bare decision when lim is set.
type benchService struct {
	testgrpc.UnimplementedTestServiceServer
	lim *floodgate.Limiter
}

func (s *benchService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.lim != nil {
		if _, err := s.lim.Allow(ctx, "addr:bufconn"); err != nil {
			return nil, err
		}
	}
	return &testgrpc.SimpleResponse{}, nil
}

// BenchmarkInterceptorBufconn measures a unary call on an in-memory
// connection: without limiting, with a bare decision in the handler, with
// a bare decision in an interceptor of its own (what any interceptor costs:
// grpc allocates the call's UnaryServerInfo and the handler's closure for
// it), and with the interceptor (default options, then OmitFields)
// instead.
func BenchmarkInterceptorBufconn(b *testing.B) {
	lim := benchLimiter(b)
	bare := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, err := lim.Allow(ctx, "addr:bufconn"); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	icpt, err := grpclimit.New(lim, nil)
	if err != nil {
		b.Fatal(err)
	}
	omit, err := grpclimit.New(lim, &grpclimit.Options{OmitFields: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		svc  *benchService
		opts []grpc.ServerOption
	}{
		{"none", &benchService{}, nil},
		{"bare", &benchService{lim: lim}, nil},
		{"bare-interceptor", &benchService{}, []grpc.ServerOption{grpc.UnaryInterceptor(bare)}},
		{"interceptor", &benchService{}, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)}},
		{"interceptor/omitfields", &benchService{}, []grpc.ServerOption{grpc.UnaryInterceptor(omit.Unary)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := serve(b, bc.svc, bc.opts)
			ctx := context.Background()
			req := &testgrpc.SimpleRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
