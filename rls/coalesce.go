package rls

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// coalescer makes the concurrent takes of one fixed-window counter one
// store call. A take of a counter with no call in flight goes out at once
// on its caller's goroutine; the takes that arrive while a call is in
// flight wait, and once it returns are decided together as a take of the
// sum of their units, on a goroutine of the coalescer's. Under load a
// counter every request carries (a route or a host limit) then costs one
// store call per round trip instead of one per request, which matters on
// Redis, where the script run is most of the cost of a descriptor (see
// README.md, Speed).
//
// A group admitted whole is what its takes in arrival order at one instant
// would get: each is admitted, with what the group's later members leave
// added to the Remaining reported after the group. For a fixed window the
// reset does not depend on the units taken, so every member's answer is
// exact; that is why only fixed-window kinds are coalesced (a token
// bucket's ResetAfter would be the group's). A group the counter does not
// admit whole (a denial, or more units than the limit holds) is decided
// again one take at a time, each on its caller's goroutine, so that every
// take that fits is admitted and every other is denied as if it had come
// alone; when what is left is less than any member takes, the group's
// denial is every member's, as each alone would get it. A store error is every member's.
//
// A member whose budget ends while its group is in flight gives up, as a
// caller of the store gives up on a call that may still be applied: its
// units may be spent, as with a store call that timed out.
type coalescer struct {
	mu      sync.Mutex
	flights map[flightKey]*flight
	wg      sync.WaitGroup // the goroutines deciding groups
	// undo makes every take ask floodgate.Request.UndoLate (see
	// New).
	undo bool
}

// flightKey names a counter: a limiter and a key.
type flightKey struct {
	lim *floodgate.Limiter
	key string
}

// flight is a counter with a store call in flight, and the takes that
// arrived since it went out.
type flight struct {
	waiting []*joined
}

// joined is a take waiting for its group's answer.
type joined struct {
	n        int64
	deadline time.Time // the caller's; zero if none
	res      floodgate.Result
	err      error
	alone    bool          // the group was not admitted whole: decide alone
	done     chan struct{} // signalled once res, err and alone are set; buffered
}

var joinedPool = sync.Pool{New: func() any { return &joined{done: make(chan struct{}, 1)} }}

// take is lim.Apply(ctx, key, a take of n units), coalesced with the
// concurrent takes of the same counter.
func (c *coalescer) take(ctx context.Context, lim *floodgate.Limiter, key string, n int64) (floodgate.Result, error) {
	k := flightKey{lim, key}
	c.mu.Lock()
	if f := c.flights[k]; f != nil {
		j := f.join(ctx, n)
		c.mu.Unlock()
		return c.await(ctx, j, lim, key, n)
	}
	if c.flights == nil {
		c.flights = map[flightKey]*flight{}
	}
	c.flights[k] = &flight{}
	c.mu.Unlock()
	res, err := lim.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n, UndoLate: c.undo}, nil)
	c.next(k)
	return res, err
}

// join adds a take of n units to the call in flight for the counter, and
// returns what await takes; it returns nil, and does nothing, when no
// call is in flight for it (take then makes the call). It lets a caller
// do other work while the take waits.
func (c *coalescer) join(ctx context.Context, lim *floodgate.Limiter, key string, n int64) *joined {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.flights[flightKey{lim, key}]; f != nil {
		return f.join(ctx, n)
	}
	return nil
}

// join adds a take to f's waiting ones; c.mu is held.
func (f *flight) join(ctx context.Context, n int64) *joined {
	j := joinedPool.Get().(*joined)
	j.n = n
	j.deadline, _ = ctx.Deadline()
	f.waiting = append(f.waiting, j)
	return j
}

// await returns the answer of j, a take of n units of lim's key that
// joined a call in flight.
func (c *coalescer) await(ctx context.Context, j *joined, lim *floodgate.Limiter, key string, n int64) (floodgate.Result, error) {
	select {
	case <-j.done:
	case <-ctx.Done():
		// The group's goroutine may still write j: it is left to the GC.
		return floodgate.Result{}, ctx.Err()
	}
	res, err, alone := j.res, j.err, j.alone
	*j = joined{done: j.done}
	joinedPool.Put(j)
	if alone {
		return lim.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n, UndoLate: c.undo}, nil)
	}
	return res, err
}

// next hands the takes that arrived during k's call to a goroutine that
// decides them, or ends k's flight when none did.
func (c *coalescer) next(k flightKey) {
	if group := c.following(k); group != nil {
		c.wg.Add(1)
		go c.run(k, group)
	}
}

// following returns the takes waiting on k and clears them, or ends k's
// flight and returns nil when there are none.
func (c *coalescer) following(k flightKey) []*joined {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.flights[k]
	if len(f.waiting) == 0 {
		delete(c.flights, k)
		return nil
	}
	group := f.waiting
	f.waiting = nil
	return group
}

// run decides groups of k's takes until none is waiting: one goroutine per
// busy counter, not one per group.
func (c *coalescer) run(k flightKey, group []*joined) {
	defer c.wg.Done()
	for group != nil {
		c.decide(k, group)
		group = c.following(k)
	}
}

// decide takes the units of a group at once and answers its members.
func (c *coalescer) decide(k flightKey, group []*joined) {
	var total int64
	var deadline time.Time
	for _, j := range group {
		total += j.n
		if j.deadline.After(deadline) {
			deadline = j.deadline
		}
	}
	// The call lasts as long as the member that waits longest: the others
	// stop waiting at their own deadlines.
	ctx := context.Background()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	res, err := k.lim.Apply(ctx, k.key, floodgate.Request{Op: floodgate.OpTake, N: total, UndoLate: c.undo}, nil)
	switch {
	case len(group) == 1:
		// The group's take is the member's own.
		group[0].res, group[0].err = res, err
	case err == nil && res.Allowed:
		left := total
		for _, j := range group {
			left -= j.n
			j.res = res
			j.res.Remaining = res.Remaining + left
			j.res.Granted = j.n
		}
	case err == nil && res.Remaining < least(group):
		// No member fits in what is left: each alone would be denied
		// at this instant with this answer, and a denial changes nothing.
		for _, j := range group {
			j.res = res
		}
	case err == nil || errors.Is(err, floodgate.ErrExceedsLimit):
		for _, j := range group {
			j.alone = true
		}
	default:
		for _, j := range group {
			j.err = err
		}
	}
	for _, j := range group {
		j.done <- struct{}{}
	}
}

// least is the fewest units a member of group takes.
func least(group []*joined) int64 {
	n := group[0].n
	for _, j := range group[1:] {
		n = min(n, j.n)
	}
	return n
}

// wait waits for the goroutines deciding groups.
func (c *coalescer) wait() { c.wg.Wait() }
