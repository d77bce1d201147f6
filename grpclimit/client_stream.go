package grpclimit

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// defaultStreamBuffer is the default of ClientOptions.StreamBuffer: grpc's
// own retry buffer per call (grpc.MaxRetryRPCBufferSize's default).
const defaultStreamBuffer = 256 << 10

// Stream is a grpc.StreamClientInterceptor that retries a stream the server
// refused, as Unary retries a call, for as long as the client has received
// no message of it:
//
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(c.Unary),
//		grpc.WithChainStreamInterceptor(c.Stream), ...)
//
// The stream it returns keeps every message the client sends until the
// first message from the server arrives. When a receive ends the stream
// with a status that Unary would retry (ResourceExhausted with a
// RetryInfo, as this package's Stream interceptor refuses a stream at its
// open; Unavailable with a RetryInfo, within the retry budget), it waits
// as Unary does, opens the stream again, sends the kept messages again in
// their order (and CloseSend, if the client had called it), and receives
// from the new stream; the caller sees only the new stream's messages and
// status. The attempts, waits and budget are Unary's, per stream.
//
// A send that meets the end of a refused stream (io.EOF) is kept and
// reported as sent, and so are the sends after it: the next receive learns
// the status and, if it retries, sends them on the new stream; if not, it
// returns the status, as a plain stream's receive does after an io.EOF.
// Opening the stream is retried the same way when it fails with such a
// status.
//
// No retry follows once the client has received a message (the stream is
// committed, and the kept messages are dropped), or once the messages
// kept exceed ClientOptions.StreamBuffer bytes (256 KiB by default, grpc's
// own retry buffer), or for a message that is not a protocol buffer
// (its size is not known). A server that refuses a stream after its
// handler has read messages, with a RetryInfo and before sending any
// message, gets them again on the retry: this package's Stream
// interceptor does so when Options.Cost denies a message; the RetryInfo
// says the stream may be retried. Header and Trailer are the current
// attempt's.
//
// The messages are kept by reference, as grpc.ClientStream's contract
// allows (a message must not be modified after SendMsg). Do not enable
// gRPC's own retry policy for the same codes: the attempts multiply.
func (c *Client) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s := &retryStream{c: c, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err == nil {
		s.cur.Store(&attempt{cs: cs})
		return s, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.retryLocked(err, 0); err != nil {
		return nil, err
	}
	return s, nil
}

// attempt is one stream of a retryStream: the n-th, from 0.
type attempt struct {
	cs grpc.ClientStream
	n  int
}

// retryStream is a client stream that Client.Stream opens again after a
// refusal. mu guards its fields but cur, which changes only under it;
// SendMsg and RecvMsg call the current stream without holding it, so that
// a send and a receive on two goroutines, as grpc allows, never wait for
// each other, and a retry (which holds it) runs between them.
type retryStream struct {
	c        *Client
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	cur atomic.Pointer[attempt]

	mu sync.Mutex
	// kept is what the client sent since the stream opened, until it is
	// committed; size is their bytes.
	kept []any
	size int
	// closed says that the client called CloseSend.
	closed bool
	// committed says that the stream is not retried again: a message
	// came, the buffer overflowed, a status was final.
	committed bool
	// ended says that a send met io.EOF: cur ended, and the sends after
	// it are kept without being sent, until a receive learns whether the
	// stream is retried.
	ended  bool
	waited time.Duration
}

func (s *retryStream) Context() context.Context     { return s.cur.Load().cs.Context() }
func (s *retryStream) Header() (metadata.MD, error) { return s.cur.Load().cs.Header() }
func (s *retryStream) Trailer() metadata.MD         { return s.cur.Load().cs.Trailer() }

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	s.closed = true
	cur, ended := s.cur.Load(), s.ended && !s.committed
	s.mu.Unlock()
	if ended {
		return nil // sent by the retry, if there is one
	}
	return cur.cs.CloseSend()
}

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.committed {
		s.keep(m)
	}
	cur, committed := s.cur.Load(), s.committed
	if s.ended {
		s.mu.Unlock()
		if committed {
			return io.EOF // as the ended stream would answer
		}
		return nil // kept for the retry
	}
	s.mu.Unlock()
	err := cur.cs.SendMsg(m)
	if !errors.Is(err, io.EOF) || committed {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.cur.Load() != cur:
		// A retry opened a new stream after m was kept: it sent m, even
		// if the new stream has been committed since.
		return nil
	case s.committed:
		return err
	}
	s.ended = true
	return nil
}

// keep adds m to the messages a retry sends again, or commits the stream
// when m does not fit the buffer.
func (s *retryStream) keep(m any) {
	pm, ok := m.(proto.Message)
	if !ok {
		s.commit()
		return
	}
	n := proto.Size(pm)
	if s.size+n > s.c.streamBuffer {
		s.commit()
		return
	}
	s.kept = append(s.kept, m)
	s.size += n
}

// commit ends the retries of the stream.
func (s *retryStream) commit() {
	s.committed = true
	s.kept, s.size = nil, 0
}

func (s *retryStream) RecvMsg(m any) error {
	for {
		cur := s.cur.Load()
		err := cur.cs.RecvMsg(m)
		s.mu.Lock()
		switch {
		case s.cur.Load() != cur:
			// Not reached while the client receives on one goroutine,
			// as grpc requires; a new stream is in place all the same.
			s.mu.Unlock()
			continue
		case err == nil || errors.Is(err, io.EOF):
			if !s.committed {
				s.commit()
				s.c.success()
			}
			s.mu.Unlock()
			return err
		case s.committed:
			s.mu.Unlock()
			return err
		}
		err = s.retryLocked(err, cur.n)
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// retryLocked opens the stream again after attempt n failed with err,
// waiting as Client.next says, and sends it the kept messages; or it
// commits the stream and returns the error the caller gets. It holds mu
// throughout, sends included: a send on another goroutine waits for the
// new stream rather than going to the ended one.
func (s *retryStream) retryLocked(err error, n int) error {
	for {
		delay, ok := s.c.next(s.ctx, err, n, s.waited)
		if !ok {
			s.commit()
			return err
		}
		if serr := sleep(s.ctx, delay); serr != nil {
			s.commit()
			return status.FromContextError(serr).Err()
		}
		s.waited += delay
		n++
		var cs grpc.ClientStream
		cs, err = s.streamer(s.ctx, s.desc, s.cc, s.method, s.opts...)
		if err != nil {
			continue
		}
		s.cur.Store(&attempt{cs: cs, n: n})
		s.ended = false
		for _, m := range s.kept {
			if e := cs.SendMsg(m); e != nil {
				// io.EOF: the new stream ended too, and its receive
				// tells why; anything else is the send's own error
				// (the message cannot be encoded), which the first
				// attempt met as well.
				if !errors.Is(e, io.EOF) {
					s.commit()
					return e
				}
				s.ended = true
				break
			}
		}
		if s.closed && !s.ended {
			if e := cs.CloseSend(); e != nil {
				s.commit()
				return e
			}
		}
		return nil
	}
}
