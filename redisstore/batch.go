package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/observe"

	"github.com/floodgate-go/floodgate"
)

// batcher sends a node's concurrent decisions to Redis in pipelines: each
// of its goroutines takes the decisions queued (waiting up to linger for
// more, at most size), sends them as one pipeline of EVALSHAs to the node
// (one per algorithm, and per hash slot on a Cluster, each making all its
// decisions with batch.lua; one per Limits decision, with its own script),
// re-sends those that met NOSCRIPT as EVALs, re-runs alone those that a
// Cluster redirected, and hands each reply to its caller.
type batcher struct {
	s       *Store
	n       *node
	in      chan *pending
	quit    chan struct{} // closed by stop: the goroutines end
	stopped chan struct{} // closed once they ended and the queue is drained
	wg      sync.WaitGroup
	// active counts the node's direct call and pipelines in flight: a
	// decision takes the direct path (Store.call) only when it is 0.
	active atomic.Int32
	// grouping says which decisions share a script call.
	grouping grouping
}

// pending is one decision waiting for its reply. A caller that gets its
// reply returns its pending to pendings for the next decision; one that
// gives up (its context or its deadline ended) leaves it to the batcher
// and the GC.
type pending struct {
	ctx    context.Context
	prog   prog
	key    [1]string // KEYS of one of the five algorithms
	keys   []string  // KEYS of a Limits, or nil
	args   []any
	sendBy time.Time // a batch taking it later fails it unsent
	due    time.Time // the store's deadline of the decision: its batch ends by then
	reply  any
	err    error
	done   chan struct{} // signalled once the reply is in; buffered
	timer  *time.Timer   // the caller's deadline; reused with the pending
	// late, when not nil, is given the reply of a decision whose caller
	// gave up before it came (floodgate.Request.UndoLate).
	late func(any)
	// state says who has the pending: waiting, delivered (the batcher
	// delivered first; the caller takes the reply) or left (the caller
	// gave up first; the batcher hands the reply to late). Set once.
	state atomic.Int32
}

// The states of a pending.
const (
	waiting int32 = iota
	delivered
	left
)

var pendings = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(s *Store, n *node) *batcher {
	b := &batcher{
		s:       s,
		n:       n,
		in:      make(chan *pending, s.batchSize*s.pipelines),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	switch {
	case s.cluster != nil:
		b.grouping = groupSlot
	case s.ring != nil || n.client.Load() != nil:
		b.grouping = groupAll
	}
	b.wg.Add(s.pipelines)
	for range s.pipelines {
		go b.run()
	}
	return b
}

// lateFor is how much longer than its decisions' deadlines a batch
// carrying takes that ask floodgate.Request.UndoLate waits for its reply
// (when Timeout is shorter); their callers do not wait for it. Measured
// with 8 processes × 64 goroutines starting cold on a sharded quota on
// the Cluster of the tests (shard's TestRedisColdExact): at 2·Timeout
// (100ms) units were left unreturned; at 500ms none in 50 runs, and up to
// 11 of 2,000 in 2 of 10 runs under the race detector beside other
// packages' tests; at 2s none there either, but a batch waiting for a
// late reply is a pipeline that serves no new decisions, and 500 to 900
// decisions of a run failed in half the runs alone, against almost none
// at 500ms.
const lateFor = 500 * time.Millisecond

// errLate reports a batched decision whose reply did not come by its
// deadline.
var errLate = errors.New("redisstore: no reply before the deadline")

// do queues a decision and waits for its reply. With a timeout T
// (Options.Timeout), a decision that no batch has taken within 3T/4 fails
// unsent (it would have too little of T left for its reply; failing it
// unsent keeps the batches serving the others, as waitSlot does for
// unbatched calls), and the caller waits at most T, whatever the client
// does. With NoTimeout only ctx bounds the wait.
func (b *batcher) do(ctx context.Context, id prog, rkey string, keys []string, args []any, late func(any)) (any, error) {
	p := pendings.Get().(*pending)
	p.ctx, p.prog, p.key[0], p.keys, p.args, p.late = ctx, id, rkey, keys, args, late
	timeout := b.s.timeout
	if timeout == NoTimeout {
		select {
		case b.in <- p:
		case <-b.quit:
			p.reset()
			return nil, unavailable(floodgate.ErrClosed, nil)
		case <-ctx.Done():
			p.reset()
			return nil, ctx.Err()
		}
		select {
		case <-p.done:
			return p.result()
		case <-ctx.Done():
			return p.leave(ctx.Err())
		case <-b.stopped:
			return b.orphan(p)
		}
	}
	now := time.Now()
	// The caller's own deadline is not the batch's: a caller that gives
	// up earlier stops waiting (ctx.Done below), and the others keep
	// their Timeout.
	p.sendBy, p.due = now.Add(timeout-timeout/4), now.Add(timeout)
	if p.timer == nil {
		p.timer = time.NewTimer(timeout)
	} else {
		p.timer.Reset(timeout)
	}
	select {
	case b.in <- p:
	case <-b.quit:
		p.timer.Stop()
		p.reset()
		return nil, unavailable(floodgate.ErrClosed, nil)
	case <-ctx.Done():
		p.timer.Stop()
		p.reset()
		return nil, ctx.Err()
	case <-p.timer.C:
		p.reset()
		return nil, fmt.Errorf("%w: %w", errStarved, context.DeadlineExceeded)
	}
	select {
	case <-p.done:
		p.timer.Stop()
		return p.result()
	case <-ctx.Done():
		return p.leave(ctx.Err())
	case <-p.timer.C:
		return p.leave(fmt.Errorf("%w: %w", errLate, context.DeadlineExceeded))
	case <-b.stopped:
		p.timer.Stop()
		return b.orphan(p)
	}
}

// leave gives p up with err, unless the batcher delivered its reply
// first: then the caller takes the reply. A pending given up is left to
// the batcher and the GC.
func (p *pending) leave(err error) (any, error) {
	if p.state.CompareAndSwap(waiting, left) {
		return nil, err
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	<-p.done
	return p.result()
}

// result returns p's reply and returns p to pendings.
func (p *pending) result() (any, error) {
	reply, err := p.reply, p.err
	p.reset()
	return reply, err
}

// orphan returns the outcome of p once the batcher has stopped: the reply
// if a batch delivered it, else floodgate.ErrClosed (p was queued after the queue
// was drained, and no batch will take it).
func (b *batcher) orphan(p *pending) (any, error) {
	select {
	case <-p.done:
		return p.result()
	default:
		return nil, unavailable(floodgate.ErrClosed, nil)
	}
}

// reset clears p and returns it to pendings.
func (p *pending) reset() {
	p.ctx, p.key[0], p.keys, p.args, p.reply, p.err, p.late = nil, "", nil, nil, nil, nil, nil
	p.prog, p.sendBy, p.due = 0, time.Time{}, time.Time{}
	p.state.Store(waiting)
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
			p.err = unavailable(floodgate.ErrClosed, nil)
			p.done <- struct{}{}
		default:
			close(b.stopped)
			return
		}
	}
}

func (b *batcher) run() {
	defer b.wg.Done()
	batch := make([]*pending, 0, b.s.batchSize)
	var timer *time.Timer
	if b.s.linger > 0 {
		timer = time.NewTimer(b.s.linger)
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
			timer.Reset(b.s.linger)
		}
	fill:
		for len(batch) < b.s.batchSize {
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

// group is the decisions of a batch sent as one script call: the single
// script for one decision, batch.lua's for more. A Limits decision and an
// in-flight call are groups of their own.
type group struct {
	prog    prog
	slot    uint16
	members []*pending
	cmd     *redis.Cmd
	eval    bool // re-sent as EVAL, after NOSCRIPT
	alone   bool // its members ran alone, after a redirection
}

// groups splits the live decisions of batch (those whose callers still
// wait, taken before their sendBy) into script calls, in the batch's
// order.
func (b *batcher) groups(batch []*pending, now time.Time) []group {
	var gs []group
next:
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.err = err // its caller is gone: do not spend its units
			continue
		}
		if !p.sendBy.IsZero() && now.After(p.sendBy) {
			// Too late to be sent and answered by the caller's deadline.
			p.err = fmt.Errorf("%w: %w", errStarved, context.DeadlineExceeded)
			continue
		}
		var slot uint16
		switch {
		case b.grouping == groupNone || p.prog > progLimits:
			// No batch script: an in-flight call.
			gs = append(gs, group{prog: p.prog, members: []*pending{p}})
			continue next
		case b.grouping == groupSlot:
			slot = slotOf(p.key[0])
		}
		for i := range gs {
			if g := &gs[i]; g.prog == p.prog && g.slot == slot {
				g.members = append(g.members, p)
				continue next
			}
		}
		gs = append(gs, group{prog: p.prog, slot: slot, members: []*pending{p}})
	}
	return gs
}

// send adds g's script call to pipe, as EVALSHA or (after NOSCRIPT) as
// EVAL, marked so that go-redis never sends it twice (see once).
func (g *group) send(ctx context.Context, pipe redis.Pipeliner, eval bool) {
	rkey, keys, args := g.members[0].key[0], g.members[0].keys, g.members[0].args
	switch {
	case len(g.members) > 1 && g.prog == progLimits:
		keys, args = limitsBatchArgs(g.members)
	case len(g.members) > 1:
		keys, args = make([]string, len(g.members)), batchArgs(g.members)
		for i, p := range g.members {
			keys[i] = p.key[0]
		}
	}
	g.cmd = evalCmd(ctx, g.prog, len(g.members) > 1, eval, rkey, keys, args)
	_ = pipe.Process(ctx, once{g.cmd})
}

// runAlone makes each of g's decisions alone through the ClusterClient,
// which follows MOVED and ASK: a Cluster refused g's call (the slot moved
// or is migrating), so none of its decisions ran. t reports each call,
// to the node the redirection names.
func (g *group) runAlone(ctx context.Context, c redis.UniversalClient, t trip) {
	g.alone = true
	if t.s != nil {
		t.node, t.decisions = redirected(g.cmd.Err(), t.node), 1
	}
	for _, p := range g.members {
		p.reply, p.err = run(ctx, c, p.prog, false, p.key[0], p.keys, p.args, t)
	}
}

// batchArgs returns batch.lua's ARGV for the decisions ps: each distinct
// argument list once, then each decision's list number. Lists are told
// apart by identity: a bound limiter's decisions mostly share one cached
// slice (argsCache), and equal lists sent twice cost only bytes.
func batchArgs(ps []*pending) []any {
	return framed(ps, func(p *pending, list int, tail []any) []any { return append(tail, list) }, len(ps))
}

// limitsBatchArgs returns limits_batch.lua's KEYS and ARGV for the Limits
// decisions ps: every decision's keys in turn; each distinct argument list
// once, then the number of decisions and, for each, its list's number and
// its number of keys.
func limitsBatchArgs(ps []*pending) ([]string, []any) {
	n := 0
	for _, p := range ps {
		n += len(p.keys)
	}
	keys := make([]string, 0, n)
	for _, p := range ps {
		keys = append(keys, p.keys...)
	}
	tail := func(p *pending, list int, tail []any) []any {
		if len(tail) == 0 {
			tail = append(tail, len(ps))
		}
		return append(tail, list, len(p.keys))
	}
	return keys, framed(ps, tail, 1+2*len(ps))
}

// framed returns a batch script's ARGV for ps: the number of distinct
// argument lists, each list as its length and its elements, then what
// tail appends for each decision given its list's number (from 1); size is
// the tail's length in all.
func framed(ps []*pending, tail func(p *pending, list int, tail []any) []any, size int) []any {
	lists := make([][]any, 0, 2)
	after := make([]any, 0, size)
	for _, p := range ps {
		l := 0
		for l < len(lists) && !sameList(lists[l], p.args) {
			l++
		}
		if l == len(lists) {
			lists = append(lists, p.args)
		}
		after = tail(p, l+1, after)
	}
	size = 1 + len(after)
	for _, l := range lists {
		size += 1 + len(l)
	}
	args := append(make([]any, 0, size), len(lists))
	for _, l := range lists {
		args = append(args, len(l))
		args = append(args, l...)
	}
	return append(args, after...)
}

// sameList reports whether a and b are the same slice.
func sameList(a, b []any) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// deliver hands each member its reply: the call's, or its element of
// batch.lua's array.
func (g *group) deliver() {
	if g.alone {
		return
	}
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

// pipeline returns a pipeline to the batcher's node.
func (b *batcher) pipeline() redis.Pipeliner {
	if c := b.n.client.Load(); c != nil {
		return c.Pipeline()
	}
	return b.s.client.Pipeline()
}

// send sends pipe, whose script calls are those of the groups of gs in
// it, and reports it to t as one round trip carrying their decisions:
// its outcome is the worst of its commands', and its error the first of
// that outcome.
func (b *batcher) send(ctx context.Context, pipe redis.Pipeliner, gs []group, t trip, in func(*group) bool) {
	if t.s == nil {
		_, _ = pipe.Exec(ctx)
		return
	}
	start := time.Since(mono)
	_, _ = pipe.Exec(ctx)
	latency := time.Since(mono) - start
	var (
		outcome = observe.CallOK
		err     error
	)
	t.decisions = 0
	for i := range gs {
		if g := &gs[i]; in(g) {
			t.decisions += len(g.members)
			if e := g.cmd.Err(); e != nil {
				if o := callOutcome(t.ctx, e); err == nil || worse(outcome, o) != outcome {
					outcome, err = worse(outcome, o), e
				}
			}
		}
	}
	t.tell(latency, outcome, err)
}

// exec sends one batch and delivers its replies, by the latest deadline
// of its live decisions (lateFor, or Timeout, later when one of them
// asked UndoLate), handing to late the replies whose callers gave up.
func (b *batcher) exec(batch []*pending) {
	b.active.Add(1)
	defer b.active.Add(-1)
	now := time.Now()
	gs := b.groups(batch, now)
	ctx := context.Background()
	if b.s.timeout != NoTimeout && len(gs) > 0 {
		// The batch ends by the latest deadline of its decisions: each
		// caller stops waiting at its own, and a decision queued later
		// keeps its share of the timeout.
		var (
			due  time.Time
			late bool
		)
		for i := range gs {
			for _, p := range gs[i].members {
				if p.due.After(due) {
					due = p.due
				}
				late = late || p.late != nil
			}
		}
		if due.IsZero() {
			due = now.Add(b.s.timeout)
		}
		if late {
			// A reply that comes after its callers gave up still tells
			// what the decisions asking UndoLate took: wait for it a
			// while longer.
			due = due.Add(max(b.s.timeout, lateFor))
		}
		c := startCall(ctx, due.Sub(now))
		defer c.end()
		ctx = c
	}
	// A pipeline serves many callers: OnStoreCall gets
	// context.Background(), and the decisions it carries.
	t := b.s.trip(context.Background(), b.n, 0)
	if len(gs) > 0 {
		pipe := b.pipeline()
		for i := range gs {
			gs[i].send(ctx, pipe, false)
		}
		b.send(ctx, pipe, gs, t, func(*group) bool { return true })
	}
	// A server that lacks a script (a new node, a restart, SCRIPT FLUSH)
	// answers NOSCRIPT to each EVALSHA: send those again with the source.
	var retry redis.Pipeliner
	for i := range gs {
		if isNoScript(gs[i].cmd.Err()) {
			if retry == nil {
				retry = b.pipeline()
			}
			gs[i].send(ctx, retry, true)
			gs[i].eval = true
		}
	}
	if retry != nil {
		b.send(ctx, retry, gs, t, func(g *group) bool { return g.eval })
	}
	for i := range gs {
		if b.s.cluster != nil && isRedirect(gs[i].cmd.Err()) {
			gs[i].runAlone(ctx, b.s.client, t)
		}
		gs[i].deliver()
		b.n.answered(gs[i].cmd.Err())
	}
	for _, p := range batch {
		if !p.state.CompareAndSwap(waiting, delivered) {
			// Its caller gave up: a decision that was made anyway is
			// undone if it asked so.
			if p.late != nil && p.err == nil {
				p.late(p.reply)
			}
			continue
		}
		p.done <- struct{}{} // the caller may reuse p from here on
	}
}
