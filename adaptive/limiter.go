package adaptive

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// WaitMode says what Acquire does when the limit is in use.
type WaitMode int

const (
	// NoWait rejects the request at once with ErrLimitExceeded. It is the
	// default and what servers usually want: shedding early keeps latency
	// low, and the client can retry elsewhere.
	NoWait WaitMode = iota
	// WaitFIFO makes Acquire wait for a slot, first come first served, until
	// the context ends or MaxWait passes. It turns the limiter into
	// back-pressure, as batch clients want.
	WaitFIFO
	// WaitLIFO makes Acquire wait like WaitFIFO but hands a freed slot to
	// the most recent waiter first. Under a sustained backlog the oldest
	// waiters, which are the likeliest to miss their deadline anyway, time
	// out, while fresh requests are served with low latency (Netflix's
	// LifoBlockingLimiter).
	WaitLIFO
)

// LimiterOptions configures NewLimiter. A nil *LimiterOptions, or a zero
// field, means the default.
type LimiterOptions struct {
	// Now returns the current time. Only the Limiter reads the clock; it
	// passes samples with times to its Limit. The default reads the
	// runtime's monotonic clock only (time.Since of the construction
	// instant), which costs half of time.Now and cannot be distorted by a
	// step of the wall clock.
	Now func() time.Time
	// Wait says what Acquire does when the limit is in use. The default is
	// NoWait.
	Wait WaitMode
	// MaxWaiters bounds the requests waiting in Acquire (WaitFIFO and
	// WaitLIFO); a request beyond it is rejected at once. The default is 100.
	MaxWaiters int
	// MaxWait bounds the time one request waits in Acquire, in addition to
	// its context. It runs on the runtime's timers, not on Now. The default
	// is 1s (Netflix's LifoBlockingLimiter backlog timeout).
	MaxWait time.Duration
	// Partitions reserve guaranteed shares of the limit for named classes of
	// traffic, the most important first; see Partition. The default is none:
	// every request counts alike against the limit L, except that a request
	// of ClassCritical (AcquirePartition with ClassCritical) is admitted
	// while fewer than L + ceil(2·sqrt(L)) requests are in flight. That is
	// the burst allowance a Partition of Share 1 would have, the
	// square-root staffing rule; it is for a load shedder in front of the
	// limiter (package adaptive/shed) that keeps the last part of the limit
	// for critical traffic, a part too small at a small limit for the
	// critical demand's own spread (at 20 workers, 20% of the limit is 5
	// slots: 1.4 standard deviations of critical traffic at 3x overload).
	// The extra requests queue in the server; a latency-based limit sees
	// them and shrinks, and the shedder, whose gauge is in flight over the
	// limit, sheds the other classes sooner.
	Partitions []Partition
	// PartitionRule says how Partitions share the limit once it is in use;
	// it matters only with Partitions. The default is PartitionBurst.
	PartitionRule PartitionRule
	// Criticality, when non-nil, turns on ordered-criticality shedding; see
	// CriticalityOptions. It excludes Partitions. The default is off.
	Criticality *CriticalityOptions
	// Name names the Limiter in the events it reports
	// (observe.LimitChange.Name, observe.Reject.Name). The default is
	// "adaptive".
	Name string
	// Observer receives every change of the limit (OnLimitChange, with
	// context.Background(): a change follows from the samples of many
	// requests) and every rejected request (OnReject, with the context
	// given to Acquire), on the goroutine whose request caused it, after
	// the Limiter's mutex is released: an observer may call the Limiter
	// (Stats, for example), and must be fast and safe for concurrent use.
	// Events of concurrent requests may arrive in another order than they
	// happened. For gauges (the limit, the requests in flight per
	// partition), poll Stats from the metrics system's collection callback
	// instead. The default (nil) reports nothing; the Observer's other
	// fields do not apply.
	Observer *observe.Observer
}

// DefaultName is the default of LimiterOptions.Name.
const DefaultName = "adaptive"

// Limiter enforces a Limit: it admits a request while fewer requests are in
// flight than the limit (subject to partitions), and turns the end of every
// admitted request into a Sample for the Limit.
//
// The zero value is not usable; create one with NewLimiter. A Limiter is
// safe for concurrent use. One mutex guards its counters and its Limit: each
// Acquire and each end of a token takes it once. Of the code it is given,
// only the Limit's Update runs under that mutex: the clock is read before
// taking it and the Observer is called after releasing it.
type Limiter struct {
	limit      Limit
	now        func() time.Time // nil: monotonic time since base
	base       time.Time
	wait       WaitMode
	maxWaiters int
	maxWait    time.Duration
	name       string
	onChange   func(context.Context, observe.LimitChange) // nil: none
	onReject   func(context.Context, observe.Reject)      // nil: none
	mode       partitionMode
	bursts     bool           // modePartitioned with PartitionBurst
	index      map[string]int // partition name -> index in parts; read-only
	fallback   int            // index of traffic with no known partition

	mu        sync.Mutex
	current   int // the limit being enforced, >= 1
	inflight  int
	parts     []partition
	burstSum  int // PartitionBurst: the sum of the partitions' allowances
	critBurst int // without partitions: ClassCritical's room above the limit, ceil(2·sqrt(current))
	waiters   []*waiter
	succeeded uint64
	dropped   uint64
	ignored   uint64
	rejected  uint64
}

// waiter is a request blocked in Acquire. A releasing goroutine grants it a
// token under the Limiter's mutex and closes ready.
type waiter struct {
	part    int
	ready   chan struct{}
	granted bool
	tok     Token
}

// NewLimiter returns a Limiter that enforces limit, configured by opts (nil
// means defaults). The Limiter owns limit from now on: do not share it.
func NewLimiter(limit Limit, opts *LimiterOptions) (*Limiter, error) {
	if limit == nil {
		return nil, invalid("NewLimiter needs a Limit")
	}
	var o LimiterOptions
	if opts != nil {
		o = *opts
	}
	if o.Wait < NoWait || o.Wait > WaitLIFO {
		return nil, invalid("LimiterOptions.Wait %d unknown", o.Wait)
	}
	if o.MaxWaiters < 0 || o.MaxWait < 0 {
		return nil, invalid("LimiterOptions has a negative field")
	}
	if o.PartitionRule > PartitionReference {
		return nil, invalid("LimiterOptions.PartitionRule %d unknown", o.PartitionRule)
	}
	if err := o.Observer.Validate(); err != nil {
		return nil, invalid("LimiterOptions.Observer: %w", err)
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := floodgate.CheckName(o.Name); err != nil {
		return nil, invalid("LimiterOptions.Name: %w", err)
	}
	if o.MaxWaiters == 0 {
		o.MaxWaiters = 100
	}
	if o.MaxWait == 0 {
		o.MaxWait = time.Second
	}
	parts, index, fallback, mode, err := buildPartitions(o.Partitions, o.Criticality)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		limit:      limit,
		now:        o.Now,
		wait:       o.Wait,
		maxWaiters: o.MaxWaiters,
		maxWait:    o.MaxWait,
		name:       o.Name,
		mode:       mode,
		bursts:     mode == modePartitioned && o.PartitionRule == PartitionBurst,
		index:      index,
		fallback:   fallback,
		parts:      parts,
	}
	if o.Observer != nil {
		l.onChange, l.onReject = o.Observer.OnLimitChange, o.Observer.OnReject
	}
	if o.Now != nil {
		l.base = o.Now()
	} else {
		l.base = time.Now()
	}
	l.setLimit(max(1, limit.Current()), 0)
	return l, nil
}

// clock returns the current time as an offset from l.base. Tokens keep
// offsets rather than time.Time values: two clock reads were most of the
// cost of an Acquire and Success, and the default clock reads only the
// monotonic clock (about 25ns against 47ns for time.Now on the benchmark
// machine), with no time.Time arithmetic on the way.
func (l *Limiter) clock() time.Duration {
	if l.now == nil {
		return time.Since(l.base)
	}
	return l.now().Sub(l.base)
}

// Token is an admitted request. End it with exactly one of Success, Dropped
// or Ignore; the first call releases the slot and later calls on the same
// Token do nothing. Calling them on two copies of one Token releases the slot
// twice and corrupts the count: pass a *Token around, not copies.
//
// Token is a small value, not a pointer, so that Acquire does not allocate.
// The zero Token (as returned with an error) is inert: its methods do
// nothing. A Token is not safe for concurrent use.
type Token struct {
	l        *Limiter
	start    time.Duration // admission, as an offset from l.base
	inflight int32
	part     int32
}

// Outcome is how an admitted request ended, as a value: one of the three
// ways to end a Token, for code that decides the ending apart from making
// the call (see MiddlewareOptions.Outcome). The zero value is Success.
type Outcome uint8

const (
	// Success is the ending of Token.Success: the request completed, and its
	// latency is a sample.
	Success Outcome = iota
	// Dropped is the ending of Token.Dropped: the request timed out or was
	// refused for overload, and its latency is a sample marked Dropped.
	Dropped
	// Ignore is the ending of Token.Ignore: the request ended without a
	// sample.
	Ignore
)

// Success ends the request normally: its latency is a sample for the Limit.
func (t *Token) Success() { t.end(Success) }

// Dropped ends a request that timed out or was refused for overload (by this
// server's dependencies or a deadline). Its latency is a sample marked
// Dropped, which loss-based limits answer by cutting the limit.
func (t *Token) Dropped() { t.end(Dropped) }

// Ignore ends a request without a sample: it failed before its latency meant
// anything (a panic, a bad request rejected early, a client that went away),
// and its short RTT would otherwise pull the limit's RTT estimate down.
func (t *Token) Ignore() { t.end(Ignore) }

// end ends the token with o, which is one of Success, Dropped and Ignore.
func (t *Token) end(o Outcome) {
	if t.l == nil {
		return
	}
	l := t.l
	t.l = nil
	l.release(*t, o)
}

// Acquire admits a request of no particular partition, or rejects it with
// ErrLimitExceeded. With WaitFIFO or WaitLIFO it waits for a slot first,
// until ctx ends (then it returns ctx.Err()) or MaxWait passes. On success
// the caller must end the token with Success, Dropped or Ignore.
//
// With partitions, the request counts as unknown traffic, which uses only
// capacity left below the limit; in the criticality mode it is ClassDefault.
func (l *Limiter) Acquire(ctx context.Context) (Token, error) {
	return l.acquire(ctx, l.fallback)
}

// AcquirePartition is Acquire for a request of the named partition (a
// Partition's Name, or a Class constant in the criticality mode). An unknown
// name counts as no partition. Without partitions it is the same as Acquire,
// except for ClassCritical, which may go ceil(2·sqrt(L)) above the limit
// (see LimiterOptions.Partitions).
func (l *Limiter) AcquirePartition(ctx context.Context, partition string) (Token, error) {
	p, ok := l.index[partition]
	if !ok {
		p = l.fallback
	}
	return l.acquire(ctx, p)
}

func (l *Limiter) acquire(ctx context.Context, p int) (Token, error) {
	if err := ctx.Err(); err != nil {
		return Token{}, err
	}
	now := l.clock()
	l.mu.Lock()
	if l.admits(p, now) {
		tok := l.take(p, now)
		l.mu.Unlock()
		return tok, nil
	}
	if l.wait == NoWait || len(l.waiters) >= l.maxWaiters {
		reason := "queue"
		if l.wait == NoWait {
			reason = "limit"
		}
		r := l.reject(p, reason)
		l.mu.Unlock()
		l.notifyReject(ctx, r)
		return Token{}, ErrLimitExceeded
	}
	w := &waiter{part: p, ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()
	return l.await(ctx, w)
}

// await blocks until w is granted a token, ctx ends or MaxWait passes.
func (l *Limiter) await(ctx context.Context, w *waiter) (Token, error) {
	timer := time.NewTimer(l.maxWait)
	defer timer.Stop()
	var err error
	reason := "canceled"
	select {
	case <-w.ready:
		return w.tok, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err, reason = ErrLimitExceeded, "timeout"
	}
	l.mu.Lock()
	if w.granted {
		// A release granted the slot while we were giving up. Keep it if
		// only MaxWait passed; give it back if the caller has gone.
		l.mu.Unlock()
		tok := w.tok
		if ctx.Err() == nil {
			return tok, nil
		}
		tok.Ignore()
		return Token{}, err
	}
	if i := slices.Index(l.waiters, w); i >= 0 {
		l.waiters = slices.Delete(l.waiters, i, i+1)
	}
	r := l.reject(w.part, reason)
	l.mu.Unlock()
	l.notifyReject(ctx, r)
	return Token{}, err
}

// release ends a token: it updates the counters and the Limit, and hands
// freed slots to waiters.
func (l *Limiter) release(t Token, o Outcome) {
	now := l.clock()
	l.mu.Lock()
	if l.bursts {
		l.accrue(int(t.part), now)
	}
	l.inflight--
	l.parts[t.part].busy--
	old := l.current
	switch o {
	case Success:
		l.succeeded++
	case Dropped:
		l.dropped++
	case Ignore:
		l.ignored++
	}
	if o != Ignore {
		rtt := max(0, now-t.start)
		if l.bursts {
			// The partition's average RTT converts its slot-time into
			// burst credit (see Partition); the weight is 1/16.
			if q := &l.parts[t.part]; q.rtt == 0 {
				q.rtt = float64(rtt)
			} else {
				q.rtt += (float64(rtt) - q.rtt) / 16
			}
		}
		s := Sample{Start: l.base.Add(t.start), RTT: rtt, InFlight: int(t.inflight), Dropped: o == Dropped}
		if next := max(1, l.limit.Update(s)); next != old {
			l.setLimit(next, now)
		}
	}
	if len(l.waiters) > 0 {
		l.grant(now)
	}
	next, inflight := l.current, l.inflight
	l.mu.Unlock()
	if next != old && l.onChange != nil {
		l.onChange(context.Background(), observe.LimitChange{Name: l.name, Old: old, New: next, InFlight: inflight})
	}
}

// admits reports whether a request of partition p may start at now. l.mu
// is held.
func (l *Limiter) admits(p int, now time.Duration) bool {
	switch l.mode {
	case modePartitioned:
		if l.bursts {
			return l.admitsBurst(p, now)
		}
		return l.inflight < l.current || l.parts[p].busy < l.parts[p].limit
	case modeOrdered:
		return l.inflight < l.parts[p].limit
	default:
		return l.inflight < l.current || (p == plainCritical && l.inflight < l.current+l.critBurst)
	}
}

// take admits a request of partition p at now. l.mu is held.
func (l *Limiter) take(p int, now time.Duration) Token {
	if l.bursts {
		l.accrue(p, now)
	}
	l.inflight++
	l.parts[p].busy++
	return Token{l: l, start: now, inflight: int32(l.inflight), part: int32(p)}
}

// reject counts a rejection of partition p and describes it for the
// observer. l.mu is held.
func (l *Limiter) reject(p int, reason string) observe.Reject {
	l.rejected++
	l.parts[p].rejected++
	return observe.Reject{Name: l.name, Partition: l.parts[p].name, Limit: l.current, InFlight: l.inflight, Reason: reason}
}

// notifyReject reports r to OnReject. l.mu is not held.
func (l *Limiter) notifyReject(ctx context.Context, r observe.Reject) {
	if l.onReject != nil {
		l.onReject(ctx, r)
	}
}

// grant hands free slots to waiters, in arrival order for WaitFIFO and newest
// first for WaitLIFO, skipping waiters whose partition cannot be admitted.
// The token's start is the grant time, so time spent waiting is not part of
// the RTT sample. l.mu is held.
func (l *Limiter) grant(now time.Duration) {
	n := len(l.waiters)
	for k := range n {
		i := k
		if l.wait == WaitLIFO {
			i = n - 1 - k
		}
		w := l.waiters[i]
		if !l.admits(w.part, now) {
			continue
		}
		w.tok = l.take(w.part, now)
		w.granted = true
		close(w.ready)
		l.waiters[i] = nil
	}
	l.waiters = slices.DeleteFunc(l.waiters, func(w *waiter) bool { return w == nil })
}

// setLimit changes the enforced limit and the partitions' shares of it at
// now. l.mu is held (or l is not yet shared).
func (l *Limiter) setLimit(limit int, now time.Duration) {
	l.current = limit
	l.burstSum = 0
	if l.mode == modePlain {
		l.critBurst = int(math.Ceil(burstSpread * math.Sqrt(float64(limit))))
		return
	}
	for i := range l.parts {
		q := &l.parts[i]
		if l.bursts {
			l.accrue(i, now) // credit earned under the old guarantee
		}
		q.limit = shareOf(limit, q.share)
		if l.bursts {
			q.burst = int(math.Ceil(burstSpread * math.Sqrt(float64(q.limit))))
			q.credit = min(q.credit, burstCredit*float64(q.burst))
			l.burstSum += q.burst
		}
	}
}

// Limit returns the limit being enforced.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// InFlight returns the number of admitted requests not yet ended.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}

// Utilization returns the requests in flight over the limit being enforced:
// 0 when idle, 1 when the limit is in use, above 1 when partitions'
// guarantees or critical requests' bursts took the total past the limit. It
// takes the Limiter's mutex once and does not allocate; a *Limiter is a
// shed.Gauge through it.
func (l *Limiter) Utilization() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return float64(l.inflight) / float64(l.current)
}

// Stats returns a snapshot of the limiter's state and counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		Limit:     l.current,
		InFlight:  l.inflight,
		Waiting:   len(l.waiters),
		Succeeded: l.succeeded,
		Dropped:   l.dropped,
		Ignored:   l.ignored,
		Rejected:  l.rejected,
	}
	if l.mode != modePlain {
		s.Partitions = make([]PartitionStats, len(l.parts))
		for i, p := range l.parts {
			s.Partitions[i] = PartitionStats{Name: p.name, Limit: p.limit, InFlight: p.busy, Rejected: p.rejected}
		}
	}
	return s
}
