package inflight

import (
	"context"
	"sync"
	"time"
)

// renewer renews the holds that expire, for the Limiter that owns it: one
// goroutine per Limiter, started by the first such hold and stopped by
// Close. Its registrations sit in a list in order of their next renewal,
// which is the order they were added or last renewed in, since every hold
// is renewed RenewEvery after the previous time: adding, removing and
// renewing are O(1) and need no heap or timer per hold. A hold released
// before its first renewal is due is unlinked and never renewed.
//
// mu guards the list and every field of its registrations; the store is
// called without it.
type renewer struct {
	store Store
	name  string // the Limiter's
	ttl   time.Duration
	every time.Duration

	mu         sync.Mutex
	head, tail *renewal
	started    bool
	closed     bool
	wake       chan struct{} // the list became non-empty
	ctx        context.Context
	cancel     context.CancelFunc
	exited     chan struct{} // closed when the goroutine ends
	free       sync.Pool     // of *renewal
}

// renewal is the registration of one hold. It is pooled: its generation,
// which remove advances, tells a Slot's first Release from later ones on
// a reused registration.
type renewal struct {
	prev, next *renewal
	linked     bool // in the list
	lost       bool // a renewal found the hold gone
	gen        uint64
	key        string
	hold       Hold
	due        time.Time
}

// maxRenewing is the most renewals in flight at once, so that many slots
// due together (a burst of long requests) are renewed in about one round
// trip's time each rather than one after another.
const maxRenewing = 16

func (r *renewer) init(store Store, name string, ttl, every time.Duration) {
	r.store, r.name, r.ttl, r.every = store, name, ttl, every
	r.wake = make(chan struct{}, 1)
	r.exited = make(chan struct{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
}

// add registers h for renewal and returns its registration and generation,
// or nil once the renewer is closed (the hold then expires).
func (r *renewer) add(key string, h Hold) (*renewal, uint64) {
	e, _ := r.free.Get().(*renewal)
	if e == nil {
		e = new(renewal)
	}
	now := time.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.free.Put(e)
		return nil, 0
	}
	e.key, e.hold, e.due, e.lost = key, h, now.Add(r.every), false
	wasEmpty := r.head == nil
	r.link(e)
	gen := e.gen
	if !r.started {
		r.started = true
		go r.run()
	} else if wasEmpty {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	return e, gen
}

// remove ends the registration e of generation gen, reporting whether this
// call ended it (ok) and whether the hold was still held as far as the
// renewals know (held).
func (r *renewer) remove(e *renewal, gen uint64) (held, ok bool) {
	r.mu.Lock()
	if e.gen != gen {
		r.mu.Unlock()
		return false, false
	}
	e.gen++
	held = !e.lost
	if e.linked {
		r.unlink(e)
	}
	e.key, e.hold = "", Hold{}
	r.mu.Unlock()
	r.free.Put(e)
	return held, true
}

// link appends e to the list. The caller holds mu.
func (r *renewer) link(e *renewal) {
	e.prev, e.next, e.linked = r.tail, nil, true
	if r.tail != nil {
		r.tail.next = e
	} else {
		r.head = e
	}
	r.tail = e
}

// unlink takes e out of the list. The caller holds mu.
func (r *renewer) unlink(e *renewal) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		r.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		r.tail = e.prev
	}
	e.prev, e.next, e.linked = nil, nil, false
}

// due is a registration to renew, copied under mu.
type due struct {
	e    *renewal
	gen  uint64
	key  string
	hold Hold
}

// run renews the registrations as they fall due, until close.
func (r *renewer) run() {
	defer close(r.exited)
	var (
		batch []due
		timer *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return
		}
		now := time.Now()
		batch = batch[:0]
		for e := r.head; e != nil && !e.due.After(now); e = r.head {
			// Renewed now, the hold is next due RenewEvery from now: to
			// the end of the list, which stays in order of due times.
			r.unlink(e)
			e.due = now.Add(r.every)
			r.link(e)
			batch = append(batch, due{e: e, gen: e.gen, key: e.key, hold: e.hold})
		}
		wait := time.Duration(-1)
		if r.head != nil {
			wait = r.head.due.Sub(now)
		}
		r.mu.Unlock()

		if len(batch) > 0 {
			r.renewAll(batch)
			clear(batch) // drop the keys and references until the next batch
			continue
		}
		var fire <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		}
		select {
		case <-fire:
		case <-r.wake:
		case <-r.ctx.Done():
		}
	}
}

// renewAll renews the holds of batch, up to maxRenewing at once, and waits
// for them all. A hold the store reports gone is lost: it is taken out of
// the list and its Release frees nothing. A failed renewal is tried again
// RenewEvery later; the hold lives until its TTL meanwhile.
func (r *renewer) renewAll(batch []due) {
	if len(batch) == 1 {
		r.renewOne(&batch[0])
		return
	}
	n := min(len(batch), maxRenewing)
	var (
		wg   sync.WaitGroup
		next = make(chan int, len(batch))
	)
	for i := range batch {
		next <- i
	}
	close(next)
	wg.Add(n)
	for range n {
		go func() {
			defer wg.Done()
			for i := range next {
				r.renewOne(&batch[i])
			}
		}()
	}
	wg.Wait()
}

// renewOne renews the hold of d.
func (r *renewer) renewOne(d *due) {
	held, err := r.store.Renew(r.ctx, r.name, d.key, d.hold, r.ttl)
	if err != nil || held {
		return
	}
	r.mu.Lock()
	if d.e.gen == d.gen && d.e.linked {
		r.unlink(d.e)
		d.e.lost = true
	}
	r.mu.Unlock()
}

// close stops the goroutine and waits for it, renewals in flight
// included; the registrations stay until their slots are released.
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	started := r.started
	r.mu.Unlock()
	r.cancel()
	if started {
		// Every Close waits, the second one too.
		<-r.exited
	}
}
