package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// batcher sends concurrent decisions to Redis in pipelines: each of its
// goroutines takes the decisions queued (waiting up to linger for more, at
// most size), sends them as one pipeline of EVALSHAs, re-sends those that
// met NOSCRIPT as EVALs, and hands each reply to its caller.
type batcher struct {
	client  redis.UniversalClient
	size    int
	linger  time.Duration
	timeout time.Duration
	in      chan *pending
	quit    chan struct{}
	wg      sync.WaitGroup
	started atomic.Int64 // batches sent, up to cold
	cold    int64        // the number of first batches with coldTimeout
}

// pending is one decision waiting for its reply. A caller that gets its
// reply returns its pending to pendings for the next decision; one that
// gives up (its context ended) leaves it to the batcher and the GC.
type pending struct {
	ctx   context.Context
	kind  floodgate.Kind
	key   [1]string // KEYS
	args  []any
	reply any
	err   error
	cold  bool          // sent in one of the first batches
	done  chan struct{} // signalled once the reply is in; buffered
}

var pendings = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(client redis.UniversalClient, size int, linger time.Duration, pipelines int, timeout time.Duration) *batcher {
	b := &batcher{
		client:  client,
		size:    size,
		linger:  linger,
		timeout: timeout,
		in:      make(chan *pending, size*pipelines),
		quit:    make(chan struct{}),
		cold:    int64(pipelines),
	}
	b.wg.Add(pipelines)
	for range pipelines {
		go b.run()
	}
	return b
}

// do queues a decision and waits for its reply or for ctx's end. The
// store's timeout bounds each pipeline, not the wait in the queue.
func (b *batcher) do(ctx context.Context, kind floodgate.Kind, rkey string, args []any) (any, error, bool) {
	p := pendings.Get().(*pending)
	p.ctx, p.kind, p.key[0], p.args = ctx, kind, rkey, args
	select {
	case b.in <- p:
	case <-b.quit:
		p.reset()
		return nil, unavailable(ErrClosed, nil), false
	case <-ctx.Done():
		p.reset()
		return nil, ctx.Err(), false
	}
	select {
	case <-p.done:
		reply, err, cold := p.reply, p.err, p.cold
		p.reset()
		return reply, err, cold
	case <-ctx.Done():
		return nil, ctx.Err(), false
	}
}

// reset clears p and returns it to pendings.
func (p *pending) reset() {
	done := p.done
	*p = pending{done: done}
	pendings.Put(p)
}

// stop ends the goroutines after their pipelines in flight, failing the
// decisions still queued.
func (b *batcher) stop() {
	close(b.quit)
	b.wg.Wait()
	for {
		select {
		case p := <-b.in:
			p.err = unavailable(ErrClosed, nil)
			p.done <- struct{}{}
		default:
			return
		}
	}
}

func (b *batcher) run() {
	defer b.wg.Done()
	batch := make([]*pending, 0, b.size)
	var timer *time.Timer
	if b.linger > 0 {
		timer = time.NewTimer(b.linger)
		timer.Stop()
		defer timer.Stop()
	}
	for {
		select {
		case p := <-b.in:
			batch = append(batch[:0], p)
		case <-b.quit:
			return
		}
		if timer != nil {
			timer.Reset(b.linger)
		}
	fill:
		for len(batch) < b.size {
			if timer == nil {
				select {
				case p := <-b.in:
					batch = append(batch, p)
				default:
					break fill
				}
				continue
			}
			select {
			case p := <-b.in:
				batch = append(batch, p)
			case <-timer.C:
				break fill
			case <-b.quit:
				break fill
			}
		}
		if timer != nil {
			timer.Stop()
		}
		b.exec(batch)
		clear(batch)
	}
}

// exec sends one batch and delivers its replies.
func (b *batcher) exec(batch []*pending) {
	timeout, cold := b.timeout, false
	if b.started.Load() < b.cold && b.started.Add(1) <= b.cold {
		timeout, cold = max(timeout, coldTimeout), true
	}
	ctx := context.Background()
	if timeout != NoTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmds := make([]*redis.Cmd, len(batch))
	pipe := b.client.Pipeline()
	for i, p := range batch {
		if p.ctx.Err() != nil {
			continue // its caller is gone: do not spend its units
		}
		cmds[i] = programs[p.kind].EvalSha(ctx, pipe, p.key[:], p.args...)
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx)
	}
	// A server that lacks a script (a new node, a restart, SCRIPT FLUSH)
	// answers NOSCRIPT to each EVALSHA: send those again with the source.
	var retry redis.Pipeliner
	for i, c := range cmds {
		if c != nil && isNoScript(c.Err()) {
			if retry == nil {
				retry = b.client.Pipeline()
			}
			p := batch[i]
			cmds[i] = programs[p.kind].Eval(ctx, retry, p.key[:], p.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i, p := range batch {
		if c := cmds[i]; c != nil {
			p.reply, p.err = c.Result()
		} else {
			p.err = p.ctx.Err()
		}
		p.cold = cold
		p.done <- struct{}{} // the caller may reuse p from here on
	}
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
