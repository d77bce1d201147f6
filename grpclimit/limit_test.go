package grpclimit_test

import (
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
