package grpclimit_test

import (
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
)

// An *Interceptor is a go-grpc-middleware ratelimit.Limiter: its Limit
// plugs into that package's interceptors. The dependency is the tests'
// only; the package itself does not import go-grpc-middleware.
var _ ratelimit.Limiter = (*grpclimit.Interceptor)(nil)

func TestLimitInGoGRPCMiddleware(t *testing.T) {
	lim := fixedLimiter(t, floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 1}, nil)
	icpt, err := grpclimit.New(lim, nil)
	require.NoError(t, err)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(icpt))})

	var hdr metadata.MD
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=1;w=1`}, hdr.Get("ratelimit-policy"))

	// go-grpc-middleware replaces the status with its own, without the
	// details; the fields and the pushback still reach the client.
	var trl metadata.MD
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, []string{"334"}, trl.Get("grpc-retry-pushback-ms"))
	assert.Equal(t, []string{`"default";r=0;t=1`}, hdr.Get("ratelimit"))
	assert.EqualValues(t, 1, svc.unary.Load())
}
