package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/memstore"
)

// echo is the example's service: UnaryCall answers at once.
type echo struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echo) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

// listen serves srv on an in-memory listener and returns a client of it,
// and a function that stops both.
func listen(srv *grpc.Server, opts ...grpc.DialOption) (testgrpc.TestServiceClient, func()) {
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	opts = append(opts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient("passthrough:///bufconn", opts...)
	if err != nil {
		panic(err)
	}
	return testgrpc.NewTestServiceClient(cc), func() {
		_ = cc.Close()
		srv.Stop()
	}
}

// A server whose callers may each make 2 calls a second: the third call
// at once is refused with ResourceExhausted and a RetryInfo saying when to
// come back, and every answer carries the ratelimit fields.
func Example() {
	// The store's clock stands still, so that the output is the same on
	// every run; a server leaves Now unset.
	store, err := memstore.New(&memstore.Options{Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	if err != nil {
		panic(err)
	}
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 2}, nil)
	if err != nil {
		panic(err)
	}
	icpt, err := grpclimit.New(lim, nil) // keyed by the peer's address
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(icpt.Unary),
		grpc.ChainStreamInterceptor(icpt.Stream),
	)
	testgrpc.RegisterTestServiceServer(srv, echo{})
	client, stop := listen(srv)
	defer stop()

	for range 3 {
		var hdr metadata.MD
		_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
		st := status.Convert(err)
		fmt.Println(st.Code(), hdr.Get("ratelimit"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry after", ri.GetRetryDelay().AsDuration())
			}
		}
	}
	// Output:
	// OK ["default";r=1;t=1]
	// OK ["default";r=0;t=1]
	// ResourceExhausted ["default";r=0;t=1]
	// retry after 500ms
}

// A server that runs at most 2 calls of each caller at once, whose clients
// retry refusals at the time the server names.
func ExampleNewInflight() {
	conc, err := inflight.New(inflight.NewLocalStore(), 2, nil)
	if err != nil {
		panic(err)
	}
	defer conc.Close()
	icpt, err := grpclimit.NewInflight(conc, nil)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(icpt.Unary),
		grpc.ChainStreamInterceptor(icpt.Stream),
	)
	testgrpc.RegisterTestServiceServer(srv, echo{})

	retry, err := grpclimit.NewClient(nil)
	if err != nil {
		panic(err)
	}
	client, stop := listen(srv, grpc.WithChainUnaryInterceptor(retry.Unary))
	defer stop()

	_, err = client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	fmt.Println(status.Code(err))
	// Output: OK
}
