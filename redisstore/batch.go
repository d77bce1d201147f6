package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// batcher sends concurrent decisions to Redis in pipelines: each of its
// goroutines takes the decisions queued (waiting up to linger for more, at
// most size), sends them as one pipeline of EVALSHAs (one per algorithm,
// and per hash slot on a Cluster, each making all its decisions with
// batch.lua), re-sends those that met NOSCRIPT as EVALs, and hands each
// reply to its caller.
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
	// grouping says which decisions share a script call.
	grouping grouping
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

		grouping: groupingOf(client),
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

// grouping says which decisions of a batch may share one script call:
// those whose keys a client sends to one server.
type grouping int

const (
	groupNone grouping = iota // a call per decision (a Ring, a client of unknown kind)
	groupAll                  // one server: a call per algorithm
	groupSlot                 // a Cluster: a call per algorithm and hash slot
)

func groupingOf(client redis.UniversalClient) grouping {
	switch client.(type) {
	case *redis.Client:
		return groupAll
	case *redis.ClusterClient:
		return groupSlot
	}
	return groupNone
}

// group is the decisions of a batch sent as one script call: the single
// script for one decision, batch.lua's for more.
type group struct {
	kind    floodgate.Kind
	slot    uint16
	members []*pending
	cmd     *redis.Cmd
}

// groups splits the live decisions of batch (those whose callers still
// wait) into script calls, in the batch's order.
func (b *batcher) groups(batch []*pending) []group {
	var gs []group
next:
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.err = err // its caller is gone: do not spend its units
			continue
		}
		var slot uint16
		switch b.grouping {
		case groupNone:
			gs = append(gs, group{kind: p.kind, members: []*pending{p}})
			continue next
		case groupSlot:
			slot = slotOf(p.key[0])
		}
		for i := range gs {
			if g := &gs[i]; g.kind == p.kind && g.slot == slot {
				g.members = append(g.members, p)
				continue next
			}
		}
		gs = append(gs, group{kind: p.kind, slot: slot, members: []*pending{p}})
	}
	return gs
}

// send adds g's script call to pipe, as EVALSHA or (after NOSCRIPT) as
// EVAL.
func (g *group) send(ctx context.Context, pipe redis.Pipeliner, eval bool) {
	script, keys, args := programs[g.kind], g.members[0].key[:], g.members[0].args
	if len(g.members) > 1 {
		script, keys, args = batchPrograms[g.kind], make([]string, len(g.members)), batchArgs(g.members)
		for i, p := range g.members {
			keys[i] = p.key[0]
		}
	}
	if eval {
		g.cmd = script.Eval(ctx, pipe, keys, args...)
	} else {
		g.cmd = script.EvalSha(ctx, pipe, keys, args...)
	}
}

// batchArgs returns batch.lua's ARGV for the decisions ps: each distinct
// argument list once, then each decision's list number. Lists are told
// apart by identity: a bound limiter's decisions mostly share one cached
// slice (argsCache), and equal lists sent twice cost only bytes.
func batchArgs(ps []*pending) []any {
	lists := make([][]any, 0, 2)
	index := make([]any, len(ps))
	for i, p := range ps {
		l := 0
		for l < len(lists) && !sameList(lists[l], p.args) {
			l++
		}
		if l == len(lists) {
			lists = append(lists, p.args)
		}
		index[i] = l + 1
	}
	args := append(make([]any, 0, 1+len(lists)*8+len(ps)), len(lists))
	for _, l := range lists {
		args = append(args, len(l))
		args = append(args, l...)
	}
	return append(args, index...)
}

// sameList reports whether a and b are the same slice.
func sameList(a, b []any) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// deliver hands each member its reply: the call's, or its element of
// batch.lua's array.
func (g *group) deliver() {
	v, err := g.cmd.Result()
	if len(g.members) == 1 {
		g.members[0].reply, g.members[0].err = v, err
		return
	}
	replies, ok := v.([]any)
	if err == nil && (!ok || len(replies) != len(g.members)) {
		err = unavailable(ErrReply, fmt.Errorf("batch of %d decisions answered with %T %v", len(g.members), v, v))
	}
	for i, p := range g.members {
		if err != nil {
			p.err = err
			continue
		}
		if e, ok := replies[i].(redis.Error); ok {
			p.err = e
		} else {
			p.reply = replies[i]
		}
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
	gs := b.groups(batch)
	if len(gs) > 0 {
		pipe := b.client.Pipeline()
		for i := range gs {
			gs[i].send(ctx, pipe, false)
		}
		_, _ = pipe.Exec(ctx)
	}
	// A server that lacks a script (a new node, a restart, SCRIPT FLUSH)
	// answers NOSCRIPT to each EVALSHA: send those again with the source.
	var retry redis.Pipeliner
	for i := range gs {
		if isNoScript(gs[i].cmd.Err()) {
			if retry == nil {
				retry = b.client.Pipeline()
			}
			gs[i].send(ctx, retry, true)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i := range gs {
		gs[i].deliver()
	}
	for _, p := range batch {
		p.cold = cold
		p.done <- struct{}{} // the caller may reuse p from here on
	}
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
