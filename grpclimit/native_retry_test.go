package grpclimit_test

import (
	"context"
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
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// retryPolicy is a client service config whose retry policy retries
// ResourceExhausted up to 4 attempts, as a user of gRPC's own retries
// writes it; grpc honours grpc-retry-pushback-ms in place of its backoff.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
    "backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`

// TestNativeRetryPolicy: gRPC's own retry policy retries a denial only when
// it is a trailers-only response: with the fields in the header (the
// default) it never does; with DenialFieldsInTrailer or OmitFields it
// retries at the pushback, unary calls and streams alike.
func TestNativeRetryPolicy(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    grpclimit.Options
		retried bool
	}{
		{"fields in the header", grpclimit.Options{}, false},
		{"DenialFieldsInTrailer", grpclimit.Options{DenialFieldsInTrailer: true}, true},
		{"OmitFields", grpclimit.Options{OmitFields: true}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := memstore.New(nil)
			require.NoError(t, err)
			// One call per 100ms on one key: a call right after another
			// is refused with a pushback of up to 100ms.
			lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: 100 * time.Millisecond, Burst: 1}, nil)
			require.NoError(t, err)
			rec := &decisions{}
			opts := tt.opts
			opts.OnDecision = rec.record
			icpt, err := grpclimit.New(lim, &opts)
			require.NoError(t, err)
			svc := &service{}
			c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary), grpc.StreamInterceptor(icpt.Stream)},
				grpc.WithDefaultServiceConfig(retryPolicy))
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			calls, failed := 0, 0
			for ; calls < 10 && rec.refusals() == 0; calls++ {
				if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
					require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
					failed++
				}
			}
			require.Positive(t, rec.refusals(), "no call was refused in %d", calls)
			if tt.retried {
				assert.Zero(t, failed, "calls refused for good")
				assert.EqualValues(t, calls, svc.unary.Load(), "calls served")
				rec.checkWaits(t)
			} else {
				assert.Equal(t, 1, failed, "calls refused for good")
				assert.EqualValues(t, calls-1, svc.unary.Load(), "calls served")
			}

			// A stream refused at its open, the same way.
			before := rec.refusals()
			streams, sfailed := 0, 0
			for ; streams < 10 && rec.refusals() == before; streams++ {
				stream, err := c.StreamingInputCall(ctx)
				require.NoError(t, err)
				if _, err := stream.CloseAndRecv(); err != nil {
					require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
					sfailed++
				}
			}
			require.Greater(t, rec.refusals(), before, "no stream was refused in %d", streams)
			if tt.retried {
				assert.Zero(t, sfailed, "streams refused for good")
			} else {
				assert.Equal(t, 1, sfailed, "streams refused for good")
			}
		})
	}
}

// TestDenialFieldsInTrailer: the fields of a denial come in its trailer,
// beside the pushback, and its header is empty; an admitted call's fields
// are still in its header.
func TestDenialFieldsInTrailer(t *testing.T) {
	lim := fixedLimiter(t, floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 1}, nil)
	icpt, err := grpclimit.New(lim, &grpclimit.Options{DenialFieldsInTrailer: true})
	require.NoError(t, err)
	c := serve(t, &service{}, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})
	var hdr, trl metadata.MD
	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=1;w=1`}, hdr.Get("ratelimit-policy"))
	assert.Empty(t, trl.Get("ratelimit-policy"))

	_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Empty(t, hdr.Get("ratelimit-policy"), "header")
	assert.Equal(t, []string{`"default";q=1;w=1`}, trl.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"default";r=0;t=1`}, trl.Get("ratelimit"))
	assert.Equal(t, []string{"334"}, trl.Get("grpc-retry-pushback-ms"))
}
