package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore"
)

// holds counts the slots an inflight.Limiter took and released.
type holds struct{ acquired, released atomic.Int64 }

func (h *holds) observer() *observe.Observer {
	return &observe.Observer{
		OnAcquire: func(_ context.Context, a observe.Acquire) {
			if a.Outcome == observe.Allowed {
				h.acquired.Add(1)
			}
		},
		OnRelease: func(context.Context, observe.Release) { h.released.Add(1) },
	}
}

// heldSlots returns the slots of key held under name in store, as a
// limiter of that name reads them: the in-flight count of an Acquire, less
// its own slot.
// It returns -1, and logs why, when it cannot tell: it runs in
// require.Eventually's goroutine, where require cannot stop the test.
func heldSlots(t testing.TB, store inflight.Store, name, key string) int64 {
	t.Helper()
	probe, err := inflight.New(store, 1_000_000, &inflight.Options{Name: name})
	if err != nil {
		t.Errorf("inflight.New: %v", err)
		return -1
	}
	defer probe.Close()
	s, err := probe.Acquire(t.Context(), key)
	if err != nil || !s.Allowed {
		t.Logf("the probe's Acquire = %+v, %v", s.Status, err)
		return -1
	}
	if err := s.Release(t.Context()); err != nil {
		t.Logf("the probe's Release: %v", err)
	}
	return s.InFlight - 1
}

// cancels holds the cancel functions of the calls a test makes, by the id
// each call sends in its "call-id" metadata, so that the server's side (a
// handler, a key function, a store) can cancel its call from the client,
// which then sends the cancellation to the server as a real client does.
type cancels struct{ m sync.Map }

// cancel cancels the client side of the call of ctx, a server context.
func (c *cancels) cancel(ctx context.Context) {
	ids := metadata.ValueFromIncomingContext(ctx, "call-id")
	if len(ids) == 0 {
		return
	}
	if f, ok := c.m.Load(ids[0]); ok {
		f.(context.CancelFunc)()
	}
}

// cancelAndWait cancels the call of ctx from the client, and waits until
// the server has seen it.
func (c *cancels) cancelAndWait(ctx context.Context) {
	c.cancel(ctx)
	select {
	case <-ctx.Done():
	case <-time.After(30 * time.Second): // bounds a broken test, never reached
	}
}

// when returns the moment at which the call of ctx is to be cancelled,
// from its "cancel" metadata.
func when(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "cancel"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Moments at which a call is cancelled.
const (
	cancelInHandler = "handler" // the handler has started
	cancelBefore    = "before"  // before the slot is asked for (from the key function)
	cancelAcquiring = "acquire" // once the store took the slot, before Acquire returns
)

// cancellingStore is an inflight.Store around a Store that cancels the
// calls marked cancelAcquiring once their hold is taken, and returns only
// when the server has seen the cancellation: the call's context ends while
// its slot is being acquired.
type cancellingStore struct {
	inflight.Store
	c *cancels
}

func (s cancellingStore) Acquire(ctx context.Context, name, key string, limit int64, ttl time.Duration) (inflight.Result, error) {
	res, err := s.Store.Acquire(ctx, name, key, limit, ttl)
	if when(ctx) == cancelAcquiring {
		s.c.cancelAndWait(ctx)
	}
	return res, err
}

// blockingService's EmptyCall and FullDuplexCall cancel their own call from
// the client and return when the server has seen it: a handler that runs
// until its client goes away.
type blockingService struct {
	testgrpc.UnimplementedTestServiceServer
	c       *cancels
	handled atomic.Int64
}

func (s *blockingService) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.handled.Add(1)
	s.c.cancelAndWait(ctx)
	return nil, ctx.Err()
}

func (s *blockingService) FullDuplexCall(stream grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	s.handled.Add(1)
	s.c.cancelAndWait(stream.Context())
	return stream.Context().Err()
}

// inflightStores returns the stores the in-flight tests run on: a
// LocalStore, and redisstore on the Redis at REDIS_ADDR when it is set.
func inflightStores(t *testing.T) map[string]func(t *testing.T) inflight.Store {
	t.Helper()
	stores := map[string]func(t *testing.T) inflight.Store{
		"local": func(*testing.T) inflight.Store { return inflight.NewLocalStore() },
	}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		stores["redis"] = func(t *testing.T) inflight.Store {
			// A pool for every caller and a timeout far above the
			// default's 50ms: 64 callers and the server's releases share
			// it on a loaded machine (under -race, releases waited more
			// than 5s for one of the default 10 per CPU), and these tests
			// are about releases, not about Redis's latency.
			rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256})
			s, err := redisstore.New(rdb, &redisstore.Options{Timeout: 30 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() {
				_ = s.Close()
				_ = rdb.Close()
			})
			return s
		}
	} else {
		t.Log("the in-flight tests run on a LocalStore only: set REDIS_ADDR to run them on Redis too")
	}
	return stores
}

// uniqueName returns a limiter name and a key no other test run uses, for
// tests on a shared Redis.
func uniqueName(t testing.TB) (name, key string) {
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	return "grpclimit-test-" + suffix, "client:" + suffix
}

// TestInflightCancelledCallsReleaseSlots makes 10,000 calls, unary and
// streams, from many goroutines, and cancels each from its client: most in
// the handler, some before the interceptor asks for a slot and some while
// the store takes it. Every call ends Canceled and no slot stays held.
func TestInflightCancelledCallsReleaseSlots(t *testing.T) {
	const calls, workers = 10_000, 64
	for storeName, newStore := range inflightStores(t) {
		for _, kind := range []string{"unary", "stream"} {
			t.Run(storeName+"/"+kind, func(t *testing.T) {
				c := &cancels{}
				store := newStore(t)
				name, key := uniqueName(t)
				var h holds
				// A limit no burst of these calls reaches: every call is
				// admitted, and ends cancelled.
				lim, err := inflight.New(cancellingStore{store, c}, calls, &inflight.Options{Name: name, Observer: h.observer()})
				require.NoError(t, err)
				t.Cleanup(func() { _ = lim.Close() })
				var releaseTimeouts atomic.Int64
				icpt, err := grpclimit.NewInflight(lim, &grpclimit.InflightOptions{
					Key: func(ctx context.Context, _ string) (string, bool) {
						if when(ctx) == cancelBefore {
							c.cancelAndWait(ctx)
						}
						return key, true
					},
					OnError: func(_ context.Context, _, _ string, err error) {
						// The calls cancelled before Acquire fail with
						// their context's error. A release may fail
						// with a store's timeout when Redis is slow (the
						// store then releases the hold again in the
						// background, and the count below still reaches
						// 0); nothing else may fail.
						switch {
						case errors.Is(err, context.Canceled):
						case errors.Is(err, floodgate.ErrUnavailable):
							releaseTimeouts.Add(1)
						default:
							t.Errorf("OnError: %v", err)
						}
					},
				})
				require.NoError(t, err)
				svc := &blockingService{c: c}
				client := serve(t, svc, []grpc.ServerOption{
					grpc.UnaryInterceptor(icpt.Unary), grpc.StreamInterceptor(icpt.Stream),
				})

				var next atomic.Int64
				var wg sync.WaitGroup
				codesSeen := make([]map[codes.Code]int, workers)
				for w := range workers {
					seen := map[codes.Code]int{}
					codesSeen[w] = seen
					wg.Go(func() {
						for {
							n := next.Add(1)
							if n > calls {
								return
							}
							moment := cancelInHandler
							switch n % 8 {
							case 1:
								moment = cancelBefore
							case 2:
								moment = cancelAcquiring
							}
							id := strconv.FormatInt(n, 10)
							// The timeout bounds a broken test: a call
							// that ends DeadlineExceeded fails it.
							ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
							ctx = metadata.AppendToOutgoingContext(ctx, "call-id", id, "cancel", moment)
							c.m.Store(id, cancel)
							var err error
							if kind == "unary" {
								_, err = client.EmptyCall(ctx, &testgrpc.Empty{})
							} else {
								var stream grpc.BidiStreamingClient[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]
								if stream, err = client.FullDuplexCall(ctx); err == nil {
									_, err = stream.Recv()
								}
							}
							seen[status.Code(err)]++
							cancel()
							c.m.Delete(id)
						}
					})
				}
				wg.Wait()
				total := map[codes.Code]int{}
				for _, seen := range codesSeen {
					for code, k := range seen {
						total[code] += k
					}
				}
				assert.Equal(t, map[codes.Code]int{codes.Canceled: calls}, total, "the calls' codes")
				// A call cancelled before its slot was asked for takes
				// none; every other call takes one, and reaches the
				// handler unless it was cancelled while acquiring.
				// The server sees each cancellation shortly after the
				// client (a call cancelled while acquiring returns to its
				// client before its Acquire returns): wait for the last
				// acquisitions and releases, with a bound far above what
				// they take.
				want := int64(calls - calls/8)
				require.Eventually(t, func() bool { return h.acquired.Load() == want && h.released.Load() == want }, time.Minute, 5*time.Millisecond,
					"slots taken %d, released %d, want %d", h.acquired.Load(), h.released.Load(), want)
				assert.EqualValues(t, calls-2*calls/8, svc.handled.Load(), "calls that reached the handler")
				require.Eventually(t, func() bool { return heldSlots(t, store, name, key) == 0 }, time.Minute, 10*time.Millisecond,
					"slots held after the cancelled calls")
				if n := releaseTimeouts.Load(); n > 0 {
					t.Logf("%d releases timed out, and were made again by the store", n)
				}
			})
		}
	}
}

// TestInflightCancelledCallsAtALimit cancels calls at random moments, against
// a limit that they reach: each ends Canceled or refused, and no slot stays
// held.
func TestInflightCancelledCallsAtALimit(t *testing.T) {
	const calls, workers = 2_000, 32
	for storeName, newStore := range inflightStores(t) {
		t.Run(storeName, func(t *testing.T) {
			store := newStore(t)
			name, key := uniqueName(t)
			lim, err := inflight.New(store, 4, &inflight.Options{Name: name})
			require.NoError(t, err)
			t.Cleanup(func() { _ = lim.Close() })
			icpt, err := grpclimit.NewInflight(lim, &grpclimit.InflightOptions{
				Key: func(context.Context, string) (string, bool) { return key, true },
			})
			require.NoError(t, err)
			client := serve(t, &service{}, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})

			var canceled, refused atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for {
						n := next.Add(1)
						if n > calls {
							return
						}
						// EmptyCall blocks until its context ends: cancel
						// it after 0 to 200µs, before it reaches the
						// server, in the interceptor, or in the handler.
						ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
						timer := time.AfterFunc(time.Duration(n%200)*time.Microsecond, cancel)
						_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
						switch status.Code(err) {
						case codes.Canceled:
							canceled.Add(1)
						case codes.ResourceExhausted:
							refused.Add(1)
						default:
							t.Errorf("EmptyCall = %v, want Canceled or ResourceExhausted", err)
						}
						timer.Stop()
						cancel()
					}
				})
			}
			wg.Wait()
			assert.EqualValues(t, calls, canceled.Load()+refused.Load())
			require.Eventually(t, func() bool { return heldSlots(t, store, name, key) == 0 }, time.Minute, 10*time.Millisecond,
				"slots held after the cancelled calls")
		})
	}
}

func TestInflightDenialCodes(t *testing.T) {
	for _, code := range []codes.Code{0, codes.ResourceExhausted, codes.Unavailable} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			lim, err := inflight.New(inflight.NewLocalStore(), 1, &inflight.Options{RetryAfter: 250*time.Millisecond + 1})
			require.NoError(t, err)
			t.Cleanup(func() { _ = lim.Close() })
			icpt, err := grpclimit.NewInflight(lim, &grpclimit.InflightOptions{Code: code})
			require.NoError(t, err)
			svc := &service{started: make(chan struct{}, 1)}
			c := serve(t, svc, []grpc.ServerOption{grpc.UnaryInterceptor(icpt.Unary)})

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() { _, _ = c.EmptyCall(ctx, &testgrpc.Empty{}) }()
			<-svc.started // the one slot is held

			var trl metadata.MD
			_, err = c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}, grpc.Trailer(&trl))
			st := status.Convert(err)
			want := code
			if want == 0 {
				want = codes.ResourceExhausted // the default
			}
			require.Equal(t, want, st.Code(), "%v", err)
			ri, qf := details(t, st)
			assert.Equal(t, 251*time.Millisecond, ri.GetRetryDelay().AsDuration())
			assert.Equal(t, grpclimit.InflightPolicy, qf.GetViolations()[0].GetSubject())
			assert.Equal(t, lim.Name(), qf.GetViolations()[0].GetQuotaId())
			assert.EqualValues(t, 1, qf.GetViolations()[0].GetQuotaValue())
			assert.Equal(t, []string{"251"}, trl.Get("grpc-retry-pushback-ms"))
			assert.EqualValues(t, 0, svc.unary.Load())
		})
	}
}

func TestNewInflightRefuses(t *testing.T) {
	lim, err := inflight.New(inflight.NewLocalStore(), 1, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	for name, tc := range map[string]struct {
		lim  *inflight.Limiter
		opts *grpclimit.InflightOptions
	}{
		"nil limiter":            {nil, nil},
		"zero limiter":           {&inflight.Limiter{}, nil},
		"code":                   {lim, &grpclimit.InflightOptions{Code: codes.Internal}},
		"release timeout":        {lim, &grpclimit.InflightOptions{ReleaseTimeout: -1}},
		"unavailable retryafter": {lim, &grpclimit.InflightOptions{UnavailableRetryAfter: -1}},
	} {
		_, err := grpclimit.NewInflight(tc.lim, tc.opts)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, name)
	}
}

func TestInflightStreamHoldUntilReturn(t *testing.T) {
	var h holds
	lim, err := inflight.New(inflight.NewLocalStore(), 1, &inflight.Options{Observer: h.observer()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	icpt, err := grpclimit.NewInflight(lim, &grpclimit.InflightOptions{HoldUntilReturn: true})
	require.NoError(t, err)
	c := serve(t, &service{}, []grpc.ServerOption{grpc.StreamInterceptor(icpt.Stream)})
	for i := range 3 {
		stream, err := c.StreamingInputCall(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&testgrpc.StreamingInputCallRequest{}))
		_, err = stream.CloseAndRecv()
		require.NoError(t, err, "stream %d: the one slot of the stream before it was released", i+1)
	}
	require.Eventually(t, func() bool { return h.released.Load() == 3 }, 30*time.Second, time.Millisecond)
	assert.EqualValues(t, 3, h.acquired.Load())
}

func TestInflightReleasesOnPanic(t *testing.T) {
	store := inflight.NewLocalStore()
	lim, err := inflight.New(store, 1, &inflight.Options{Name: "panic"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lim.Close() })
	icpt, err := grpclimit.NewInflight(lim, &grpclimit.InflightOptions{HoldUntilReturn: true})
	require.NoError(t, err)
	ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}})
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	func() {
		defer func() { assert.Equal(t, "handler", recover()) }()
		_, _ = icpt.Unary(ctx, nil, info, func(context.Context, any) (any, error) { panic("handler") })
	}()
	assert.Zero(t, heldSlots(t, store, "panic", "ip:192.0.2.1"), "slots held after the panic")
}
