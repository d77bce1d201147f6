package grpclimit_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/client"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// refusal returns a status error of code with a RetryInfo of hint, or
// without one when hint is 0.
func refusal(code codes.Code, hint time.Duration) error {
	st := status.New(code, "refused")
	if hint > 0 {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(hint)})
	}
	return st.Err()
}

// fakeServer is a grpc.UnaryInvoker answering each attempt with the next of
// its errors (nil for success; the last repeats), and recording when each
// attempt was made.
type fakeServer struct {
	mu       sync.Mutex
	answers  []error
	attempts []time.Time
}

func (f *fakeServer) invoke(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, time.Now())
	k := min(len(f.attempts), len(f.answers)) - 1
	return f.answers[k]
}

// call makes one call through c to f, and returns its error.
func (f *fakeServer) call(ctx context.Context, c *grpclimit.Client) error {
	return c.Unary(ctx, "/grpc.testing.TestService/UnaryCall", nil, nil, nil, f.invoke)
}

func newClient(t *testing.T, opts *grpclimit.ClientOptions) *grpclimit.Client {
	t.Helper()
	c, err := grpclimit.NewClient(opts)
	require.NoError(t, err)
	return c
}

// The tests of the retry policy run in a synctest bubble: the waits are
// virtual, so the instants of the attempts are exact.

func TestClientWaitsRetryInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hint = 300 * time.Millisecond
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, hint), refusal(codes.ResourceExhausted, hint), nil}}
		c := newClient(t, nil)
		start := time.Now()
		require.NoError(t, f.call(t.Context(), c))
		require.Len(t, f.attempts, 3)
		for i := 1; i < len(f.attempts); i++ {
			gap := f.attempts[i].Sub(f.attempts[i-1])
			// The jitter on top of the hint is below max(BaseDelay·2^n,
			// 500ms, hint/10) = 500ms here.
			assert.GreaterOrEqual(t, gap, hint, "attempt %d came %v after the one before, before the RetryInfo's %v", i+1, gap, hint)
			assert.Less(t, gap, hint+500*time.Millisecond, "attempt %d", i+1)
		}
		assert.Equal(t, f.attempts[0], start, "the first attempt is sent at once")
		assert.EqualValues(t, 10, c.RetryTokens(), "a refusal with RetryInfo spends no retry token")
	})
}

func TestClientWaitsExactlyRetryInfoWithoutJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A source whose Float64 is 0: the wait is the hint itself.
		const hint = 1234 * time.Millisecond
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, hint), nil}}
		c := newClient(t, &grpclimit.ClientOptions{Rand: rand.New(zeroSource{})})
		require.NoError(t, f.call(t.Context(), c))
		require.Len(t, f.attempts, 2)
		assert.Equal(t, hint, f.attempts[1].Sub(f.attempts[0]))
	})
}

// zeroSource is a rand.Source whose every draw is 0.
type zeroSource struct{}

func (zeroSource) Uint64() uint64 { return 0 }

func TestClientDoesNotRetryResourceExhaustedWithoutRetryInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 0), nil}}
		err := f.call(t.Context(), newClient(t, nil))
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Len(t, f.attempts, 1)

		f = &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 0), nil}}
		c := newClient(t, &grpclimit.ClientOptions{RetryWithoutInfo: true})
		require.NoError(t, f.call(t.Context(), c))
		assert.Len(t, f.attempts, 2, "with RetryWithoutInfo")
		assert.Less(t, c.RetryTokens(), 10.0, "a refusal without RetryInfo spends a retry token")
	})
}

func TestClientRetriesOnlyWhatItShould(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		attempts int
	}{
		{"unavailable/retryinfo", refusal(codes.Unavailable, 100*time.Millisecond), 2},
		{"unavailable", refusal(codes.Unavailable, 0), 1}, // a broken connection: gRPC's retry policy's to judge
		{"internal/retryinfo", refusal(codes.Internal, time.Second), 1},
		{"permissiondenied", refusal(codes.PermissionDenied, 0), 1},
		{"deadlineexceeded", refusal(codes.DeadlineExceeded, 0), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{answers: []error{tc.err, nil}}
				_ = f.call(t.Context(), newClient(t, nil))
				assert.Len(t, f.attempts, tc.attempts)
			})
		})
	}
}

func TestClientBoundsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 10*time.Millisecond)}}
		err := f.call(t.Context(), newClient(t, nil))
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the last attempt's status")
		assert.Len(t, f.attempts, 4, "the default MaxAttempts")

		f = &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 10*time.Millisecond)}}
		_ = f.call(t.Context(), newClient(t, &grpclimit.ClientOptions{MaxAttempts: 1}))
		assert.Len(t, f.attempts, 1, "MaxAttempts 1")
	})
}

func TestClientRespectsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The server asks for 300ms; 200ms are left: no retry, and no wait.
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 300*time.Millisecond), nil}}
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := f.call(ctx, newClient(t, nil))
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Len(t, f.attempts, 1)
		assert.Equal(t, start, time.Now(), "the call returned at once")

		// 1s left: the retry fits (300ms plus jitter below 500ms).
		f = &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 300*time.Millisecond), nil}}
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		require.NoError(t, f.call(ctx, newClient(t, nil)))
		assert.Len(t, f.attempts, 2)
	})
}

func TestClientCancelledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, time.Second), nil}}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		err := f.call(ctx, newClient(t, nil))
		assert.Equal(t, codes.Canceled, status.Code(err))
		assert.Len(t, f.attempts, 1)
	})
}

func TestClientBoundsTotalWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 20s a wait and 30s in all: one retry, whose jitter is trimmed
		// to what MaxWait leaves; not a second.
		f := &fakeServer{answers: []error{refusal(codes.ResourceExhausted, 20*time.Second)}}
		start := time.Now()
		_ = f.call(t.Context(), newClient(t, nil))
		assert.Len(t, f.attempts, 2)
		assert.LessOrEqual(t, time.Since(start), 30*time.Second)
	})
}

func TestClientRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A server that fails everything with Unavailable and a RetryInfo:
		// the budget (10 tokens, retries while more than 5 are left)
		// stops the retries after a few, whatever MaxAttempts allows.
		const calls = 100
		f := &fakeServer{answers: []error{refusal(codes.Unavailable, 10*time.Millisecond)}}
		c := newClient(t, nil)
		for range calls {
			_ = f.call(t.Context(), c)
		}
		assert.LessOrEqual(t, len(f.attempts), calls+5, "attempts of %d calls", calls)

		f = &fakeServer{answers: []error{refusal(codes.Unavailable, 10*time.Millisecond)}}
		_ = f.call(t.Context(), newClient(t, &grpclimit.ClientOptions{DisableRetryBudget: true}))
		assert.Len(t, f.attempts, 4, "without a budget")
	})
}

func TestNewClientRefuses(t *testing.T) {
	for name, opts := range map[string]*grpclimit.ClientOptions{
		"attempts":   {MaxAttempts: -1},
		"base":       {BaseDelay: -1},
		"max":        {BaseDelay: time.Second, MaxDelay: time.Millisecond},
		"wait":       {MaxWait: -1},
		"budget":     {RetryBudget: &client.RetryBudget{MaxTokens: 5000}},
		"two budget": {RetryBudget: &client.RetryBudget{}, DisableRetryBudget: true},
	} {
		_, err := grpclimit.NewClient(opts)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
}

// TestClientAgainstServer runs the client interceptor against the server
// interceptor on a real connection and clock: a call refused for a rate
// limit is retried no sooner than its RetryInfo says, and served.
func TestClientAgainstServer(t *testing.T) {
	store, err := memstore.New(nil) // the wall clock
	require.NoError(t, err)
	// One call per 150ms: a call sent right after another is refused with
	// a RetryInfo of up to 150ms.
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: 150 * time.Millisecond, Burst: 1}, nil)
	require.NoError(t, err)
	rec := &decisions{} // in the order of the attempts: the calls are sequential
	icpt, err := grpclimit.New(lim, &grpclimit.Options{OnDecision: rec.record})
	require.NoError(t, err)
	cl := newClient(t, nil)
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)}, grpc.WithUnaryInterceptor(cl.Unary))
	// Calls until one was refused: a stall of the machine longer than
	// 150ms between two calls lets the second through.
	calls := 0
	for ; calls < 10 && rec.refusals() == 0; calls++ {
		_, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{})
		require.NoError(t, err, "call %d", calls+1)
	}
	assert.EqualValues(t, calls, svc.unary.Load(), "calls served")
	require.Positive(t, rec.refusals(), "no call was refused in %d", calls)
	rec.checkWaits(t)
}
