package lease

import (
	"container/heap"
	"sync"
	"time"
)

// janitor expires pools and forgets idle keys: one goroutine per Store,
// sleeping until the earliest instant an entry is due. Decisions never wait
// for it: they check a pool's deadline themselves, so a late janitor only
// returns units late.
type janitor struct {
	mu   sync.Mutex
	due  dueHeap
	wake chan struct{} // a new earliest entry; capacity 1
	stop chan struct{} // closed by Close
}

func newJanitor() *janitor {
	return &janitor{wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// schedule makes e due at the local instant at, unless it is due earlier
// already; 0 schedules nothing. When e becomes due later than scheduled, the
// janitor finds out when it looks at e and schedules it again.
func (j *janitor) schedule(e *entry, at int64) {
	if at == 0 {
		return
	}
	j.mu.Lock()
	switch {
	case e.hidx < 0:
		e.due = at
		heap.Push(&j.due, e)
	case at < e.due:
		e.due = at
		heap.Fix(&j.due, e.hidx)
	default:
		j.mu.Unlock()
		return
	}
	first := j.due[0] == e
	j.mu.Unlock()
	if first {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// popDue removes and returns the entries due at now, and how long until the
// next one is (negative: none).
func (j *janitor) popDue(now int64) ([]*entry, time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var due []*entry
	for len(j.due) > 0 && j.due[0].due <= now {
		due = append(due, heap.Pop(&j.due).(*entry))
	}
	if len(j.due) == 0 {
		return due, -1
	}
	return due, time.Duration(j.due[0].due - now)
}

// runJanitor is the janitor's goroutine; Close stops it. Every binding
// of the Store reads one clock (Options.Now), on which the janitor looks
// at the entries due.
func (s *Store) runJanitor() {
	defer s.wg.Done()
	j := s.jan
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		now := s.cfg.now()
		due, wait := j.popDue(now)
		if len(due) > 0 {
			var jobs []returnJob
			for _, e := range due {
				js, next := e.b.expire(e, now)
				jobs = append(jobs, js...)
				j.schedule(e, next)
			}
			_ = s.giveBack(jobs)
			continue
		}
		if wait >= 0 {
			timer.Reset(wait)
		}
		select {
		case <-j.stop:
			return
		case <-j.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// dueHeap is a min-heap of entries by due instant; each entry knows its
// index.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(a, b int) bool { return h[a].due < h[b].due }
func (h dueHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].hidx, h[b].hidx = a, b
}

func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.hidx = len(*h)
	*h = append(*h, e)
}

func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.hidx = -1
	return e
}
