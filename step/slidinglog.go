package step

import (
	"time"

	"github.com/floodgate-go/floodgate"
)

// LogEntry is one admission in a sliding log: N units admitted for the
// instant At, in nanoseconds since the Unix epoch.
type LogEntry struct {
	At int64
	N  int64
}

// SlidingLogState is the stored state of a sliding log: its entries in time
// order in a ring that grows on demand (it never holds more than Limit
// entries, since each holds at least one unit) and their total units. The
// zero value is the empty log of a new key. A SlidingLogState is not safe for
// concurrent use; stores guard it.
type SlidingLogState struct {
	ring  []LogEntry
	head  int // index of the oldest entry
	size  int
	total int64
}

// Len returns the number of entries.
func (s *SlidingLogState) Len() int { return s.size }

// Total returns the units held by the entries.
func (s *SlidingLogState) Total() int64 { return s.total }

// Entry returns the i-th oldest entry, 0 ≤ i < Len().
func (s *SlidingLogState) Entry(i int) LogEntry { return s.ring[(s.head+i)%len(s.ring)] }

// Last returns the newest entry's instant, or false for an empty log.
func (s *SlidingLogState) Last() (int64, bool) {
	if s.size == 0 {
		return 0, false
	}
	return s.Entry(s.size - 1).At, true
}

// trim drops the entries at or before cut.
func (s *SlidingLogState) trim(cut int64) {
	for s.size > 0 && s.ring[s.head].At <= cut {
		s.total -= s.ring[s.head].N
		s.ring[s.head] = LogEntry{}
		s.head = (s.head + 1) % len(s.ring)
		s.size--
	}
	if s.size == 0 {
		s.head = 0
	}
}

// push appends n units at the instant at, which is not before the newest
// entry, merging with it when the instants are equal.
func (s *SlidingLogState) push(at, n int64) {
	s.total += n
	if s.size > 0 {
		last := &s.ring[(s.head+s.size-1)%len(s.ring)]
		if last.At == at {
			last.N += n
			return
		}
	}
	if s.size == len(s.ring) {
		grown := make([]LogEntry, max(2*len(s.ring), 4))
		for i := range s.size {
			grown[i] = s.Entry(i)
		}
		s.ring, s.head = grown, 0
	}
	s.ring[(s.head+s.size)%len(s.ring)] = LogEntry{At: at, N: n}
	s.size++
}

// Reset empties the log, keeping its memory.
func (s *SlidingLogState) Reset() {
	clear(s.ring)
	s.head, s.size, s.total = 0, 0, 0
}

// SlidingLog is the reference transition of the sliding log. It updates st in
// place: a denial only drops entries that have left the window, which no
// decision can observe. Every Store must produce the same results.
//
// With req.Check it changes nothing a decision can observe: it reports the
// step's Result and drops only the entries that have left the window.
func SlidingLog(a floodgate.SlidingLog, st *SlidingLogState, now time.Time, req floodgate.Request) (floodgate.Result, error) {
	if err := a.Validate(); err != nil {
		return floodgate.Result{}, err
	}
	if err := checkStep(req, a.Limit, now); err != nil {
		return floodgate.Result{}, err
	}
	t, w := now.UnixNano(), int64(a.Window)
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: a.Limit}}
	// Requests depart in order, so nothing is ever admitted before the
	// newest entry; entries that left the window ending there can no longer
	// matter to any decision.
	from := t
	if last, ok := st.Last(); ok {
		from = max(from, last)
	}
	// A check drops nothing: at an instant after the store's present (a
	// Limits' reservation) the entries it would drop are still in the
	// window now. It skips them instead.
	skip, dropped := 0, int64(0)
	if req.Check {
		for skip < st.size && st.Entry(skip).At <= from-w {
			dropped += st.Entry(skip).N
			skip++
		}
	} else {
		st.trim(from - w)
	}
	total := st.total - dropped
	remaining := func() int64 {
		if from > t {
			return 0
		}
		return max(a.Limit-st.total, 0) // negative after the Limit of a live key is lowered
	}
	resetAfter := func() time.Duration {
		if last, ok := st.Last(); ok && skip < st.size {
			return nsDur(last + w - t)
		}
		return 0
	}
	switch req.Op {
	case floodgate.OpTake:
		at := slAdmitAt(a, st, skip, total, from, req.N)
		wait := at - t
		if wait > maxDelayNs(req) {
			res.Remaining = 0
			if from <= t {
				res.Remaining = max(a.Limit-total, 0)
			}
			res.RetryAfter = time.Duration(wait - maxDelayNs(req))
			res.ResetAfter = resetAfter()
			return res, nil
		}
		res.Allowed, res.Granted = true, req.N
		res.Delay = time.Duration(wait)
		if req.Check {
			// As the admission would leave the log: the units at, and
			// the entries before at − Window gone.
			res.Remaining = 0
			if at <= t {
				res.Remaining = max(a.Limit-total-req.N, 0)
			}
			res.ResetAfter = nsDur(at + w - t)
			return res, nil
		}
		st.trim(at - w)
		st.push(at, req.N)
		from = at
		res.Remaining = remaining()
		res.ResetAfter = resetAfter()
		return res, nil
	case floodgate.OpTakeUpTo:
		m := int64(0)
		if from <= t {
			m = min(req.N, max(a.Limit-total, 0))
		}
		if m <= 0 {
			// When one unit fits: after the newest entry, once enough old
			// ones have left (a reservation ahead may hold the whole quota).
			res.RetryAfter = time.Duration(slAdmitAt(a, st, skip, total, from, 1) - t)
			res.ResetAfter = resetAfter()
			return res, nil
		}
		res.Allowed, res.Granted = true, m
		if req.Check {
			res.Remaining = max(a.Limit-total-m, 0)
			res.ResetAfter = nsDur(max(t, from) + w - t)
			return res, nil
		}
		st.push(t, m)
		res.Remaining = remaining()
		res.ResetAfter = resetAfter()
		return res, nil
	default: // floodgate.OpSettle: on the entry admitted at At.
		if req.Check {
			// Rare enough to settle a copy.
			c := st.clone()
			req.Check = false
			return SlidingLog(a, &c, now, req)
		}
		if e := st.find(req.At.UnixNano()); e != nil {
			if req.N > 0 {
				// Up to 2·Limit units in the log, compared without
				// overflow.
				res.Granted = min(req.N, max(a.Limit-(st.total-a.Limit), 0))
				e.N += res.Granted
				st.total += res.Granted
			} else {
				res.Granted = min(settleBack(req.N), e.N)
				e.N -= res.Granted
				st.total -= res.Granted
				st.compact()
			}
		}
		res.Allowed = res.Granted > 0
		res.Remaining = remaining()
		res.ResetAfter = resetAfter()
		return res, nil
	}
}

// clone returns a copy of s that shares no memory with it.
func (s *SlidingLogState) clone() SlidingLogState {
	c := SlidingLogState{ring: make([]LogEntry, max(s.size, 1)), size: s.size, total: s.total}
	for i := range s.size {
		c.ring[i] = s.Entry(i)
	}
	return c
}

// find returns the entry admitted at the instant at, or nil: the newest
// first, since settlements mostly concern recent work.
func (s *SlidingLogState) find(at int64) *LogEntry {
	for i := s.size - 1; i >= 0; i-- {
		e := &s.ring[(s.head+i)%len(s.ring)]
		if e.At == at {
			return e
		}
		if e.At < at {
			return nil
		}
	}
	return nil
}

// slAdmitAt returns the earliest instant, not before from, at which n more
// units fit in the window of the log st, whose first skip entries have
// left it and whose others hold total units.
func slAdmitAt(a floodgate.SlidingLog, st *SlidingLogState, skip int, total, from, n int64) int64 {
	at := from
	if excess := total + n - a.Limit; excess > 0 {
		// Wait until the oldest entries holding excess units have left.
		for i := skip; i < st.size; i++ {
			e := st.Entry(i)
			if excess -= e.N; excess <= 0 {
				at = max(at, e.At+int64(a.Window))
				break
			}
		}
	}
	return at
}

// compact removes entries left empty by a refund, keeping the order.
func (s *SlidingLogState) compact() {
	k := 0
	for i := range s.size {
		if e := s.Entry(i); e.N > 0 {
			s.ring[(s.head+k)%len(s.ring)] = e
			k++
		}
	}
	for i := k; i < s.size; i++ {
		s.ring[(s.head+i)%len(s.ring)] = LogEntry{}
	}
	s.size = k
	if k == 0 {
		s.head = 0
	}
}
