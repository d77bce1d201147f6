package redisstore

import (
	"container/heap"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"

	"github.com/floodgate-go/floodgate"
)

// The bounds of the cleaner: the holds it removes in the background, after
// an Acquire or a Release whose script call failed without saying whether
// Redis ran it.
const (
	// cleanupWorkers is the number of goroutines sending the removals: a
	// few of a node's MaxInFlight slots at most, so that the removals
	// after an outage never crowd out the decisions.
	cleanupWorkers = 4
	// cleanupQueue is the most removals waiting at once. During an
	// outage at 500k decisions per second, the calls that can leave a
	// hold behind are those sent before the breaker opened: the breaker
	// refuses the others unsent, and they leave nothing to remove. Past
	// the bound a removal is dropped and counted (Store.AbandonedHolds):
	// its hold frees at its TTL. An entry costs about 120 bytes with its
	// strings, so a full queue holds about half a megabyte.
	cleanupQueue = 4096
	// cleanupAttempts is the number of attempts of one removal: at once,
	// so that a hold freed by a healthy Redis frees its slot within a
	// round trip, then after TTL/64, doubling to at most TTL/4 (with a
	// TTL of 10s: 156ms, 312ms, 625ms, 1.25s, then 2.5s thrice), so that
	// the last comes before the TTL ends; and every queued attempt of a
	// node falls due at once when the node answers again (see
	// kickCleanup). A stall that made the call fail is likely over by the
	// later ones. A kick keeps the count: a removal makes at most
	// cleanupAttempts calls, so a flapping node cannot keep it alive.
	cleanupAttempts = 8
)

// cleanup is one hold to remove: its key and member, when the next
// attempt is due, how many were made, and the TTL that spaces them.
type cleanup struct {
	rkey, member string
	due          time.Time
	ttl          time.Duration
	tries        int
	// acquire is set for the hold of a failed Acquire, which may not be
	// in the set yet: its script may still be queued in Redis (behind a
	// DEBUG SLEEP, a CLIENT PAUSE, a stopped process) and run after the
	// attempt. Its attempts are cancels (see goneKey): one that finds
	// no hold marks the holder id, so that the script adds nothing when
	// it runs. Every removal stops at its first reply.
	acquire bool
	// n is the node of the failed call or attempt (nil: none was
	// found): the node whose next answer makes the removal due (see
	// kickCleanup).
	n *node
}

// cleanups is a min-heap of removals by due time (container/heap).
type cleanups []cleanup

func (q cleanups) Len() int           { return len(q) }
func (q cleanups) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q cleanups) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *cleanups) Push(x any)        { *q = append(*q, x.(cleanup)) }
func (q *cleanups) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = cleanup{} // drop the strings
	*q = old[:len(old)-1]
	return e
}

// cleaner removes, in the background, the holds that failed calls may
// have left in Redis: the store's own, stopped by Store.Close. Its
// goroutines start with the first removal, so a Store whose calls never
// fail ambiguously runs none. mu guards every field but dropped; the
// removals are sent without it.
type cleaner struct {
	mu      sync.Mutex
	q       cleanups
	started bool
	closed  bool
	changed chan struct{} // closed and replaced when q gets a new entry
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	dropped  atomic.Uint64 // removals given up (Store.AbandonedHolds)
	leastTTL atomic.Int64  // the shortest TTL of an Acquire, in ns; 0: none yet
}

// noteTTL records ttl, an Acquire's: a Release does not know its hold's
// TTL, and spaces its attempts by the shortest the store has granted. It
// costs an atomic load on the success path, and no allocation.
func (c *cleaner) noteTTL(ttl time.Duration) {
	for {
		old := c.leastTTL.Load()
		if old != 0 && old <= int64(ttl) {
			return
		}
		if c.leastTTL.CompareAndSwap(old, int64(ttl)) {
			return
		}
	}
}

// releaseTTL is the TTL that spaces the attempts of a Release.
func (c *cleaner) releaseTTL() time.Duration {
	if t := c.leastTTL.Load(); t > 0 {
		return time.Duration(t)
	}
	return inflight.DefaultTTL
}

// delay returns how long after attempt number tries-1 of a removal of a
// hold of ttl attempt number tries (from 0, the first, at once) is due:
// ttl/64, doubling, at most ttl/4. The first cleanupAttempts of them add
// up to less than ttl.
func delay(ttl time.Duration, tries int) time.Duration {
	if tries == 0 {
		return 0
	}
	return min(ttl>>(7-min(tries, 5)), ttl/4)
}

// add queues e, or drops and counts it when the queue is full or the
// store closed. s owns the goroutines it starts.
func (s *Store) addCleanup(e cleanup) {
	c := &s.cleaner
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.q) >= cleanupQueue {
		c.dropped.Add(1)
		return
	}
	heap.Push(&c.q, e)
	if e.n != nil {
		e.n.owed.Store(true)
	}
	if !c.started {
		c.started = true
		c.changed = make(chan struct{})
		c.ctx, c.cancel = context.WithCancel(context.Background())
		c.wg.Add(cleanupWorkers)
		for range cleanupWorkers {
			go s.cleanupWorker()
		}
		return
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// kickCleanup makes the queued removals of node n (and those of no node)
// due now: n has just answered a call (a decision, or the breaker's
// probe) after a removal failed on it or was queued for it (node.owed),
// and the holds that failed calls left during its outage (their scripts
// ran as soon as it resumed) take slots that callers are waiting for.
// Without it, they waited for their next attempt, up to a quarter of a
// TTL away. An attempt in flight during the kick that fails sets owed
// again, so the node's next answer makes it due too.
func (s *Store) kickCleanup(n *node) {
	c := &s.cleaner
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started || c.closed || len(c.q) == 0 {
		return
	}
	now := time.Now()
	kicked := false
	for i := range c.q {
		if (c.q[i].n == n || c.q[i].n == nil) && c.q[i].due.After(now) {
			c.q[i].due = now
			kicked = true
		}
	}
	if !kicked {
		return
	}
	heap.Init(&c.q)
	close(c.changed)
	c.changed = make(chan struct{})
}

// stopCleanup stops the cleaner's goroutines and waits for them: an
// attempt in flight ends at once (its context is cancelled). The removals
// still queued are dropped and counted; their holds free at their TTLs.
func (s *Store) stopCleanup() {
	c := &s.cleaner
	c.mu.Lock()
	c.closed = true
	started := c.started
	c.dropped.Add(uint64(len(c.q)))
	c.q = nil
	c.mu.Unlock()
	if started {
		c.cancel()
		c.wg.Wait()
	}
}

// AbandonedHolds returns the number of holds the store gave up removing
// in the background: the queue of removals was full, every attempt
// failed, or Close came first. Each such hold keeps its slot until its
// TTL. See "In flight" in the package doc.
func (s *Store) AbandonedHolds() uint64 { return s.cleaner.dropped.Load() }

// cleanupWorker sends the removals as they fall due, until Close.
func (s *Store) cleanupWorker() {
	c := &s.cleaner
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		c.mu.Lock()
		var batch []cleanup
		for {
			if c.closed {
				c.mu.Unlock()
				return
			}
			var wait <-chan time.Time
			if len(c.q) > 0 {
				d := time.Until(c.q[0].due)
				if d <= 0 {
					batch = c.takeDue(heap.Pop(&c.q).(cleanup))
					break
				}
				t.Reset(d)
				wait = t.C
			}
			changed := c.changed
			c.mu.Unlock()
			select {
			case <-wait:
			case <-changed:
				t.Stop()
			case <-c.ctx.Done():
				t.Stop()
			}
			c.mu.Lock()
		}
		c.mu.Unlock()
		s.attemptCleanup(batch)
	}
}

// cleanupBatch is the most cancels one call sends.
const cleanupBatch = 256

// takeDue returns e and, when e is an Acquire's, the other due removals of
// Acquires' holds on e's key, up to cleanupBatch: one call cancels them
// all. After an outage a store has hundreds of them on a hot key, and one
// call each, four at a time, took seconds. c.mu is held.
func (c *cleaner) takeDue(e cleanup) []cleanup {
	batch := []cleanup{e}
	if !e.acquire {
		return batch
	}
	now := time.Now()
	var keep []cleanup
	for len(c.q) > 0 && len(batch) < cleanupBatch && !c.q[0].due.After(now) {
		x := heap.Pop(&c.q).(cleanup)
		if x.acquire && x.rkey == e.rkey && x.ttl == e.ttl {
			batch = append(batch, x)
		} else {
			keep = append(keep, x)
		}
	}
	for _, x := range keep {
		heap.Push(&c.q, x)
	}
	return batch
}

// attemptCleanup makes one attempt of the removals batch (one, or the
// Acquires' holds of one key, see takeDue) in one script call (see
// remove: Options.Timeout and the node's slots, not its breaker): a
// Release's ZREM, or a cancel, which removes each Acquire's hold or marks
// its holder id so that the Acquire adds nothing if it runs later (see
// goneKey). One reply ends every removal of the batch. A failed attempt
// is queued again, due after delay or at the node's next answer, until
// the last; then the hold is abandoned.
func (s *Store) attemptCleanup(batch []cleanup) {
	e := batch[0]
	var (
		reply any
		n     *node
		err   error
	)
	if e.acquire {
		a := scripts.InflightArgs{Op: scripts.InflightCancel, Holder: e.member}
		for _, x := range batch[1:] {
			a.More = append(a.More, x.member)
		}
		var args []any
		if args, err = s.inflightArgs(a, e.ttl); err == nil {
			reply, n, err = s.remove(e.rkey, []string{e.rkey, goneKey(e.rkey)}, args)
		}
	} else {
		args := scripts.InflightArgs{Op: scripts.InflightRelease, Holder: e.member}.ARGV()
		reply, n, err = s.remove(e.rkey, nil, args)
	}
	if err == nil {
		if _, _, derr := decodeInflight(reply); derr == nil {
			return
		}
	}
	for _, e := range batch {
		e.tries++
		if e.tries >= cleanupAttempts || s.shut.Load() {
			s.cleaner.dropped.Add(1)
			continue
		}
		e.due = time.Now().Add(delay(e.ttl, e.tries))
		if n != nil {
			e.n = n
		}
		s.addCleanup(e)
	}
}

// remove sends a removal's script call: the path of every call (its
// node's MaxInFlight slots, Options.Timeout, the classification of
// errors) but the breaker, which it neither asks nor tells. An open
// breaker refuses decisions so that callers fail fast and a failing node
// is not sent a flood; a removal has no caller waiting, the cleaner sends
// at most cleanupWorkers of them at once, and each frees a slot that
// callers want. Behind the breaker, a removal waited for its cooldown (1s
// by default) whenever the breaker opened again after an outage, under
// the load that follows one, while the holds it was to remove kept their
// slots. A reply makes the node's other queued removals due (see
// kickCleanup).
func (s *Store) remove(rkey string, keys []string, args []any) (any, *node, error) {
	ctx := s.cleaner.ctx
	if s.shut.Load() {
		return nil, nil, unavailable(floodgate.ErrClosed, nil)
	}
	n, err := s.nodeFor(ctx, rkey)
	if err != nil {
		_, err = classify(ctx, err)
		return nil, nil, err
	}
	reply, err := s.call(ctx, n, progInflight, true, rkey, keys, args, nil)
	o, err := classify(ctx, err)
	if o == succeeded && n.owed.Load() && n.owed.CompareAndSwap(true, false) {
		s.kickCleanup(n)
	}
	return reply, n, err
}

// mayHaveRun reports whether a failed script call on node n (nil: none was
// found) may have run in Redis: it timed out or its connection broke
// after the command may have been written, or the caller's context ended
// during the call (ctxDone: classify then returns the context's error
// without its cause, and a call that never got a slot counts too, which
// costs a removal of nothing). It is false for a call never sent and for
// one Redis answered (see answered).
func mayHaveRun(n *node, err error, ctxDone bool) bool {
	if err == nil || n == nil || answered(err) || unsent(err) {
		return false
	}
	return true
}

// unsent reports whether err is that of a call never written to Redis:
// refused by an open breaker, starved of a slot, a connection that could
// not be dialled or taken from the pool, a closed store.
func unsent(err error) bool {
	if errors.Is(err, ErrBreakerOpen) || errors.Is(err, errStarved) || errors.Is(err, floodgate.ErrClosed) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		errors.Is(err, redis.ErrClosed) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// answered reports whether err is Redis' error reply (a script error, a
// refusal such as CLUSTERDOWN or OOM) or a reply of the wrong form: the
// script ran no write of inflight.lua, or ran to its end.
func answered(err error) bool {
	if errors.Is(err, ErrReply) {
		return true
	}
	var re redis.Error
	return errors.As(err, &re)
}
