package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/observe"
)

// Failed decisions are counted, not reported one by one: during an outage
// a store makes thousands of them a second, nearly all of them fast (the
// breaker is open), and an event each flooded observers (2,978 events in a
// 6s outage, in issue 16). Each node has a counter per policy label; a
// failed decision adds one to its node's with an atomic add, and a timer
// of the Store reports the counters that moved, at most one event per
// counter per Observer.FailureEvery, each with the count since the
// previous report and the first error of those failures. Close stops the
// timer and reports what is left.
//
// The hot path takes no lock: under an open breaker a FailOpen decision
// is fast, and 500,000 of them a second on one node must not queue on a
// mutex for their counting (BenchmarkFailCount, two CPUs on one counter:
// 15 ns a failure, 19-28 ns under a mutex, a gap that grows with the
// CPUs). It allocates nothing either: the box that holds an interval's
// first error is recycled (see failCount).

// failCount counts the failed decisions of one node and policy label
// since the last report, and holds the first error among them.
type failCount struct {
	n     atomic.Int64
	first atomic.Pointer[errBox] // the first error since the last report, or nil
	spare atomic.Pointer[errBox] // a box for the next first error
	last  *errBox                // the error of the last report; guarded by Store.failMu
}

// errBox holds an error behind a pointer, for atomic.Pointer.
type errBox struct{ err error }

// add counts one failure. Its error is stored before it is counted, so
// that a report that takes the count finds an error (see take).
func (c *failCount) add(err error) {
	if c.first.Load() == nil {
		b := c.spare.Swap(nil)
		if b == nil {
			b = new(errBox) // the first time, and when two failures race for the box
		}
		b.err = err
		if !c.first.CompareAndSwap(nil, b) {
			b.err = nil
			c.spare.CompareAndSwap(nil, b)
		}
	}
	c.n.Add(1)
}

// take returns the failures counted since the last report and the first
// error among them, and starts a new count. The caller holds
// Store.failMu, so takes of one counter never overlap.
func (c *failCount) take() (int64, error) {
	n := c.n.Swap(0)
	if n == 0 {
		// An error stored but not yet counted stays for the next report.
		return 0, nil
	}
	b := c.first.Swap(nil)
	if b == nil {
		// Every failure counted stored its error before counting itself,
		// or saw one stored: so a box was taken by an earlier report after
		// this count's failures had seen it, and that report's error is
		// one of theirs too.
		if c.last == nil {
			return n, nil // unreachable
		}
		return n, c.last.err
	}
	if old := c.last; old != nil {
		// No one else holds old: add takes only first and spare.
		old.err = nil
		c.spare.Store(old)
	}
	c.last = b
	return n, b.err
}

// pending reports whether failures wait to be reported.
func (c *failCount) pending() bool { return c.n.Load() != 0 }

// failCounts are a node's counters: one for the store's failure policy,
// and one for the failures returned to the caller ("error"). Under
// FailError both are one: policyFails returns the second.
type failCounts [2]failCount

// The indexes of failCounts.
const (
	policyFails = 0 // decisions the policy made ("open", "closed", "local")
	errorFails  = 1 // decisions whose error the caller got ("error")
)

// failures counts a decision that Redis failed to make, on node n (nil
// when the client could not tell which node serves the key): absorbed
// when the failure policy made it, else the caller got err.
func (s *Store) failures(n *node, absorbed bool, err error) {
	if s.onFailures == nil {
		return
	}
	fc := &s.unrouted
	if n != nil {
		fc = &n.fails
	}
	i := errorFails
	if absorbed && s.policy != FailError {
		i = policyFails
	}
	fc[i].add(err)
	if !s.failArmed.Load() {
		s.armFailures()
	}
	if s.shut.Load() {
		// A decision racing Close, which may have reported already (it
		// reports after setting shut): report this one now, so that none
		// is left pending.
		s.flushFailures(n)
	}
}

// armFailures starts the timer that reports the counters, unless it runs
// or the store is closed. The lock orders the timer's WaitGroup.Add
// before Close's Wait; it is taken about once per FailureEvery.
func (s *Store) armFailures() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || !s.failArmed.CompareAndSwap(false, true) {
		return
	}
	s.failTimers.Add(1)
	s.failTimer.Reset(s.failEvery)
}

// failTick reports the counters, on the timer's goroutine, and starts the
// timer again if failures came meanwhile.
func (s *Store) failTick() {
	defer s.failTimers.Done()
	s.flushFailures(nil)
	s.failArmed.Store(false)
	// A failure counted after the flush took its counter but before
	// failArmed was cleared saw the timer armed, and did not arm it.
	pending := s.unrouted[0].pending() || s.unrouted[1].pending()
	s.eachNode(func(n *node) { pending = pending || n.fails[0].pending() || n.fails[1].pending() })
	if pending {
		s.armFailures()
	}
}

// stopFailures stops the timer, waits for a report it runs, and reports
// what is left; Close calls it once, after setting closed.
func (s *Store) stopFailures() {
	if s.failTimer == nil {
		return
	}
	if s.failTimer.Stop() {
		s.failTimers.Done() // the timer was armed and will not run
	}
	s.failTimers.Wait()
	s.flushFailures(nil)
}

// flushFailures reports every counter that moved (and extra's, a node
// Close made after it stopped the batchers, which no map holds), outside
// the lock that serializes the takes.
func (s *Store) flushFailures(extra *node) {
	var events []observe.Failures // allocated once a report, when there is one
	collect := func(fc *failCounts, addr string) {
		for i := range fc {
			if n, err := fc[i].take(); n > 0 {
				label := "error"
				if i == policyFails {
					label = s.policy.label()
				}
				events = append(events, observe.Failures{Name: s.name, Node: addr, Policy: label, Count: n, Err: err})
			}
		}
	}
	s.failMu.Lock()
	collect(&s.unrouted, "")
	s.eachNode(func(n *node) { collect(&n.fails, n.addr) })
	if extra != nil && !s.registered(extra) {
		collect(&extra.fails, extra.addr)
	}
	s.failMu.Unlock()
	for _, e := range events {
		s.onFailures(context.Background(), e)
	}
}

// eachNode calls f for every node, reading a Cluster's or a Ring's map
// without a lock (it is copied on write).
func (s *Store) eachNode(f func(*node)) {
	if s.single != nil {
		f(s.single)
		return
	}
	for _, n := range *s.nodes.m.Load() {
		f(n)
	}
}

// registered reports whether eachNode visits n.
func (s *Store) registered(n *node) bool {
	return n == s.single || s.single == nil && (*s.nodes.m.Load())[n.addr] == n
}

// failState is the Store's part in counting failures.
type failState struct {
	onFailures func(context.Context, observe.Failures) // nil: count nothing
	failEvery  time.Duration
	unrouted   failCounts  // failures of decisions no node was found for
	failMu     sync.Mutex  // serializes the takes of the counters
	failArmed  atomic.Bool // failTimer is armed, or its report runs
	failTimer  *time.Timer // reports the counters; nil without onFailures
	failTimers sync.WaitGroup
}
