package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/grpclimit"
	"github.com/floodgate-go/floodgate/memstore"
)

// decisions records the stream interceptor's decisions in their order.
type decisions struct {
	mu   sync.Mutex
	list []decided
}

type decided struct {
	at   time.Time
	wait time.Duration // the RetryInfo of a refusal; 0 when admitted
}

func (r *decisions) record(_ context.Context, _, _ string, d floodgate.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, decided{at: time.Now(), wait: grpclimit.RetryDelay(d.RetryAfter)})
}

// refusals returns how many decisions were refusals.
func (r *decisions) refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.list {
		if d.wait > 0 {
			n++
		}
	}
	return n
}

// checkWaits checks that no decision came sooner after a refusal than the
// refusal's RetryInfo said: the calls of the test are sequential.
func (r *decisions) checkWaits(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, d := range r.list[:len(r.list)-1] {
		if d.wait > 0 {
			gap := r.list[i+1].at.Sub(d.at)
			assert.GreaterOrEqual(t, gap, d.wait, "attempt %d came %v after the refusal before it, before its RetryInfo's %v", i+2, gap, d.wait)
		}
	}
}

// pacedServer serves svc behind a stream interceptor admitting one stream
// per 100ms (one key, the wall clock), and returns a client whose streams
// go through a grpclimit.Client with opts.
func pacedServer(t *testing.T, svc *service, opts *grpclimit.ClientOptions) (testgrpc.TestServiceClient, *decisions) {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: 100 * time.Millisecond, Burst: 1}, nil)
	require.NoError(t, err)
	rec := &decisions{}
	icpt, err := grpclimit.New(lim, &grpclimit.Options{OnDecision: rec.record})
	require.NoError(t, err)
	cl := newClient(t, opts)
	return serve(t, svc, []grpc.ServerOption{grpc.StreamInterceptor(icpt.Stream)}, grpc.WithStreamInterceptor(cl.Stream)), rec
}

// bounded returns a context that ends 30s into the test: a stream the
// interceptor left hanging fails the test rather than holding it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func inputMsg(n int) *testgrpc.StreamingInputCallRequest {
	return &testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, n)}}
}

// TestClientStreamRetriesRefusedOpen: client streams opened back to back
// against a quota of one stream per 100ms are refused at their open and
// retried, after the RetryInfo, with every message sent again: each
// stream's handler gets each of its messages once.
func TestClientStreamRetriesRefusedOpen(t *testing.T) {
	svc := &service{}
	c, rec := pacedServer(t, svc, nil)
	streams := 0
	// Streams until one was refused: a stall of the machine longer than
	// 100ms between two lets the second through.
	for ; streams < 10 && rec.refusals() == 0; streams++ {
		stream, err := c.StreamingInputCall(bounded(t))
		require.NoError(t, err)
		for _, n := range []int{1, 2, 3} {
			require.NoError(t, stream.Send(inputMsg(n)))
		}
		resp, err := stream.CloseAndRecv()
		require.NoError(t, err, "stream %d", streams+1)
		assert.EqualValues(t, 6, resp.GetAggregatedPayloadSize(), "stream %d", streams+1)
	}
	require.Positive(t, rec.refusals(), "no stream was refused in %d", streams)
	assert.EqualValues(t, streams, svc.streams.Load(), "streams that reached the handler")
	assert.EqualValues(t, 3*streams, svc.messages.Load(), "messages the handler got")
	rec.checkWaits(t)
}

// TestClientStreamSendsAfterTheEnd: the client sends only once the refusal
// has ended the stream, so that every send meets io.EOF; the interceptor
// keeps them and sends them on the retry.
func TestClientStreamSendsAfterTheEnd(t *testing.T) {
	svc := &service{}
	c, rec := pacedServer(t, svc, nil)
	stream, err := c.StreamingInputCall(bounded(t))
	require.NoError(t, err)
	_, err = stream.CloseAndRecv()
	require.NoError(t, err) // the quota's one stream for now

	stream, err = c.StreamingInputCall(bounded(t))
	require.NoError(t, err)
	// The refusal ends the stream before the sends: Header waits for it.
	_, _ = stream.Header()
	const msgs = 200
	for range msgs {
		require.NoError(t, stream.Send(inputMsg(1000)))
	}
	resp, err := stream.CloseAndRecv()
	require.NoError(t, err)
	assert.EqualValues(t, msgs*1000, resp.GetAggregatedPayloadSize())
	assert.EqualValues(t, msgs, svc.messages.Load(), "messages the handler got")
	assert.Positive(t, rec.refusals())
	rec.checkWaits(t)
}

func TestClientStreamServerStreaming(t *testing.T) {
	svc := &service{}
	c, rec := pacedServer(t, svc, nil)
	req := &testgrpc.StreamingOutputCallRequest{}
	for _, n := range []int32{1, 2, 3, 4, 5} {
		req.ResponseParameters = append(req.ResponseParameters, &testgrpc.ResponseParameters{Size: n})
	}
	streams := 0
	for ; streams < 10 && rec.refusals() == 0; streams++ {
		stream, err := c.StreamingOutputCall(bounded(t), req)
		require.NoError(t, err)
		var got []int
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "stream %d", streams+1)
			got = append(got, len(m.GetPayload().GetBody()))
		}
		assert.Equal(t, []int{1, 2, 3, 4, 5}, got, "stream %d", streams+1)
	}
	require.Positive(t, rec.refusals(), "no stream was refused in %d", streams)
	assert.EqualValues(t, streams, svc.streams.Load())
	rec.checkWaits(t)
}

// TestClientStreamBidiConcurrent: bidirectional streams from many
// goroutines, each sending on one goroutine and receiving on another, on a
// quota that refuses most opens: every stream that ends well was served
// once, with each of its messages once, and echoed them all in order.
func TestClientStreamBidiConcurrent(t *testing.T) {
	store, err := memstore.New(nil)
	require.NoError(t, err)
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: 5 * time.Millisecond, Burst: 4}, nil)
	require.NoError(t, err)
	var refused atomic.Int64
	icpt, err := grpclimit.New(lim, &grpclimit.Options{OnDecision: func(_ context.Context, _, _ string, d floodgate.Decision) {
		if !d.Allowed {
			refused.Add(1)
		}
	}})
	require.NoError(t, err)
	cl := newClient(t, &grpclimit.ClientOptions{MaxAttempts: 100, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond})
	svc := &service{}
	c := serve(t, svc, []grpc.ServerOption{grpc.StreamInterceptor(icpt.Stream)}, grpc.WithStreamInterceptor(cl.Stream))

	const goroutines, perG, msgs = 16, 10, 5
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				stream, err := c.FullDuplexCall(bounded(t))
				if !assert.NoError(t, err) {
					return
				}
				sendErr := make(chan error, 1)
				go func() {
					for k := range msgs {
						body := []byte{byte(g), byte(i), byte(k)}
						if err := stream.Send(&testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: body}}); err != nil {
							sendErr <- err
							return
						}
					}
					sendErr <- stream.CloseSend()
				}()
				var got [][]byte
				for {
					var m *testgrpc.StreamingOutputCallResponse
					m, err = stream.Recv()
					if err != nil {
						break
					}
					got = append(got, m.GetPayload().GetBody())
				}
				serr := <-sendErr
				if !errors.Is(err, io.EOF) {
					assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v (send: %v; %d received)", err, serr, len(got))
					failed.Add(1)
					continue
				}
				assert.NoError(t, serr)
				require.Len(t, got, msgs)
				for k, b := range got {
					assert.Equal(t, []byte{byte(g), byte(i), byte(k)}, b)
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("%d streams served, %d refused for good, %d refusals retried or not", ok.Load(), failed.Load(), refused.Load())
	require.Positive(t, ok.Load())
	require.Positive(t, refused.Load(), "no open was refused: the test tests nothing")
	assert.Equal(t, ok.Load(), svc.streams.Load(), "streams that reached the handler")
	assert.Equal(t, msgs*ok.Load(), svc.messages.Load(), "messages the handler got")
}

// refusingServer is a FullDuplexCall and StreamingOutputCall that answer
// each stream by sending first messages (0 or more) and then ending with
// err.
type refusingServer struct {
	testgrpc.UnimplementedTestServiceServer
	first   int
	err     error
	streams atomic.Int64
}

func (s *refusingServer) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	s.streams.Add(1)
	for range s.first {
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return s.err
}

func (s *refusingServer) StreamingInputCall(stream grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	s.streams.Add(1)
	for {
		if _, err := stream.Recv(); err != nil {
			return s.err
		}
	}
}

func serveRefusing(t *testing.T, s *refusingServer, opts *grpclimit.ClientOptions) testgrpc.TestServiceClient {
	t.Helper()
	cl := newClient(t, opts)
	return serve(t, s, nil, grpc.WithStreamInterceptor(cl.Stream))
}

func TestClientStreamCommitsOnFirstMessage(t *testing.T) {
	s := &refusingServer{first: 1, err: refusal(codes.ResourceExhausted, time.Millisecond)}
	c := serveRefusing(t, s, nil)
	stream, err := c.StreamingOutputCall(bounded(t), &testgrpc.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 1, s.streams.Load(), "a stream that delivered a message was retried")
}

func TestClientStreamRetriesUntilMaxAttempts(t *testing.T) {
	s := &refusingServer{err: refusal(codes.ResourceExhausted, time.Millisecond)}
	c := serveRefusing(t, s, &grpclimit.ClientOptions{MaxAttempts: 3})
	stream, err := c.StreamingOutputCall(bounded(t), &testgrpc.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 3, s.streams.Load())
}

func TestClientStreamDoesNotRetry(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		opts *grpclimit.ClientOptions
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		send int // messages of 100 bytes sent first
	}{
		{name: "no RetryInfo", err: refusal(codes.ResourceExhausted, 0)},
		{name: "not a refusal", err: status.Error(codes.Internal, "broken")},
		{name: "deadline before the wait", err: refusal(codes.ResourceExhausted, time.Hour), ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 10*time.Second)
		}},
		{name: "messages over StreamBuffer", err: refusal(codes.ResourceExhausted, time.Millisecond), opts: &grpclimit.ClientOptions{StreamBuffer: 250}, send: 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &refusingServer{err: tt.err}
			c := serveRefusing(t, s, tt.opts)
			ctx, cancel := t.Context(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx(ctx)
			}
			defer cancel()
			stream, err := c.StreamingInputCall(ctx)
			require.NoError(t, err)
			for range tt.send {
				if err := stream.Send(inputMsg(100)); err != nil {
					require.ErrorIs(t, err, io.EOF)
					break
				}
			}
			_, err = stream.CloseAndRecv()
			assert.Equal(t, status.Code(tt.err), status.Code(err), "%v", err)
			assert.EqualValues(t, 1, s.streams.Load(), "attempts")
		})
	}
}

func TestClientStreamWithinBufferRetries(t *testing.T) {
	// The counterpart of "messages over StreamBuffer": the same messages
	// fit a larger buffer and are retried.
	s := &refusingServer{err: refusal(codes.ResourceExhausted, time.Millisecond)}
	c := serveRefusing(t, s, &grpclimit.ClientOptions{StreamBuffer: 400, MaxAttempts: 2, Rand: rand.New(zeroSource{})})
	stream, err := c.StreamingInputCall(bounded(t))
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, stream.Send(inputMsg(100)))
	}
	_, err = stream.CloseAndRecv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 2, s.streams.Load(), "attempts")
}

func TestNewClientRefusesNegativeStreamBuffer(t *testing.T) {
	_, err := grpclimit.NewClient(&grpclimit.ClientOptions{StreamBuffer: -1})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

// fakeStream is a grpc.ClientStream whose SendMsg records its messages
// (when gate is not nil, first telling entered and waiting for gate) and
// answers sendErr, and whose RecvMsg answers recv in turn.
type fakeStream struct {
	grpc.ClientStream
	entered chan struct{} // buffered
	gate    chan struct{}
	sendErr error
	recv    []error

	mu   sync.Mutex
	sent []any
}

func (f *fakeStream) SendMsg(m any) error {
	if f.gate != nil {
		f.entered <- struct{}{}
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, m)
	return f.sendErr
}

func (f *fakeStream) CloseSend() error { return nil }

func (f *fakeStream) RecvMsg(any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.recv[0]
	if len(f.recv) > 1 {
		f.recv = f.recv[1:]
	}
	return err
}

// TestClientStreamSendDuringRetry: a send whose stream is refused and
// retried while the send is under way returns nil, the retry having sent
// its message, even when the new stream is committed before the send
// returns; an io.EOF there would tell the client that a message the server
// got was not sent, and a client that stops sending at io.EOF would never
// call CloseSend.
func TestClientStreamSendDuringRetry(t *testing.T) {
	gate := make(chan struct{})
	first := &fakeStream{entered: make(chan struct{}, 1), gate: gate, sendErr: io.EOF, recv: []error{refusal(codes.ResourceExhausted, time.Millisecond)}}
	second := &fakeStream{recv: []error{nil, io.EOF}}
	attempts := []*fakeStream{first, second}
	var opened atomic.Int64
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return attempts[opened.Add(1)-1], nil
	}
	c := newClient(t, &grpclimit.ClientOptions{Rand: rand.New(zeroSource{})})
	cs, err := c.Stream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, nil, "/s/m", streamer)
	require.NoError(t, err)
	msg := inputMsg(1)
	sent := make(chan error, 1)
	go func() { sent <- cs.SendMsg(msg) }()
	// The send is under way on the first stream (the gate holds it) while
	// the receive meets the refusal, retries, and gets a message from the
	// second stream, which commits it.
	<-first.entered
	require.NoError(t, cs.RecvMsg(new(testgrpc.StreamingOutputCallResponse)))
	assert.Equal(t, []any{msg}, second.sent, "the retry sent the kept message")
	close(gate)
	assert.NoError(t, <-sent, "the send of a message the retry sent")
	assert.ErrorIs(t, cs.RecvMsg(new(testgrpc.StreamingOutputCallResponse)), io.EOF)
	assert.EqualValues(t, 2, opened.Load())
}

// TestClientStreamRetriesOpen: a stream whose opening fails with a refusal
// is opened again, up to MaxAttempts.
func TestClientStreamRetriesOpen(t *testing.T) {
	served := &fakeStream{recv: []error{nil, io.EOF}}
	var opens atomic.Int64
	streamer := func(fails int64) grpc.Streamer {
		return func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			if opens.Add(1) <= fails {
				return nil, refusal(codes.ResourceExhausted, time.Millisecond)
			}
			return served, nil
		}
	}
	c := newClient(t, &grpclimit.ClientOptions{MaxAttempts: 3, Rand: rand.New(zeroSource{})})
	desc := &grpc.StreamDesc{ServerStreams: true}
	cs, err := c.Stream(t.Context(), desc, nil, "/s/m", streamer(2))
	require.NoError(t, err)
	require.NoError(t, cs.RecvMsg(new(testgrpc.StreamingOutputCallResponse)))
	assert.EqualValues(t, 3, opens.Load())

	opens.Store(0)
	_, err = c.Stream(t.Context(), desc, nil, "/s/m", streamer(3))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.EqualValues(t, 3, opens.Load(), "opens: MaxAttempts")
}
