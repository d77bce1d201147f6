package region

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
)

// work is one quota's part of a reconcile.
type work struct {
	e     *entry
	w     int64 // the current window's index
	reply *QuotaReply
	msg   QuotaMessage // the second call's message, if any
}

// Reconcile runs one interval of the reconciler: it reads the local
// counts of the quotas with demand, reports them in one call to the
// coordinator and learns the grants, gives back locally the units the
// region holds beyond its target (debit before credit), and in a second
// call reports those debits and asks for the units it lacks (raises),
// for the current window and, near its end, the next. It makes at most two
// calls to the coordinator whatever the number of quotas and requests.
// The background reconciler calls it every Interval; call it directly
// with Options.Manual. Calls are serialized. It returns the first error
// of the interval; a failed call leaves the region on the grants it holds.
//
// With Options.Peers, Reconcile first syncs with the region's other
// processes (see Peers): it adds this process's demand to the region's and
// learns the grants the region holds; only the region's leader goes on to
// reconcile, with the demand of every process, and then publishes the
// grants it learned.
func (s *Store) Reconcile(ctx context.Context) error {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if s.closed.Load() {
		return errClosed
	}
	if s.opts.Peers != nil {
		return s.shared(ctx)
	}
	return s.reconcile(ctx)
}

// reconcile is Reconcile's protocol with the coordinator; recMu is held.
func (s *Store) reconcile(ctx context.Context) error {
	s.stats.intervals.Add(1)
	calls := int64(0)
	defer func() {
		for {
			m := s.stats.maxCalls.Load()
			if calls <= m || s.stats.maxCalls.CompareAndSwap(m, calls) {
				return
			}
		}
	}()
	exchange := func(m *Message) (*Reply, error) {
		if err := s.space(ctx); err != nil {
			return nil, err
		}
		calls++
		s.stats.calls.Add(1)
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		r, err := s.coord.Exchange(cctx, m)
		if err == nil {
			err = s.checkReply(r, len(m.Quotas))
		}
		if err != nil {
			s.stats.failed.Add(1)
			return nil, fmt.Errorf("region: coordinator: %w", err)
		}
		return r, nil
	}
	hook := func(st Step) error {
		if s.opts.Hook == nil {
			return nil
		}
		if err := s.opts.Hook(st); err != nil {
			s.crash()
			return fmt.Errorf("%w at step %v: %w", errHook, st, err)
		}
		return nil
	}

	now := s.opts.Now()
	works := s.collect(ctx, now)
	if len(works) == 0 {
		return nil
	}
	msg := &Message{Region: s.regions[s.self].Name, At: now, Quotas: make([]QuotaMessage, len(works))}
	for i, wk := range works {
		msg.Quotas[i] = wk.msg
	}
	if err := hook(StepRead); err != nil {
		return err
	}
	reply, err := exchange(msg)
	if err != nil {
		return err
	}
	for i := range works {
		works[i].reply = &reply.Quotas[i]
		s.settle(works[i].e, works[i].reply)
	}
	if err := hook(StepSynced); err != nil {
		return err
	}

	now = s.opts.Now()
	second := &Message{Region: msg.Region, At: now}
	var firstErr error
	for i := range works {
		wk := &works[i]
		q, err := s.plan(ctx, now, wk)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if len(q.Debits) > 0 || len(q.Raises) > 0 {
			second.Quotas = append(second.Quotas, q)
			wk.msg = q
		} else {
			wk.msg = QuotaMessage{}
		}
	}
	if err := hook(StepDebited); err != nil {
		return err
	}
	if len(second.Quotas) == 0 {
		return firstErr
	}
	reply, err = exchange(second)
	if err != nil {
		return err
	}
	if err := hook(StepSettled); err != nil {
		return err
	}
	k := 0
	for i := range works {
		if works[i].msg.ID != "" {
			s.settle(works[i].e, &reply.Quotas[k])
			k++
		}
	}
	return firstErr
}

// checkReply returns an error matching ErrInvalid for a reply whose shape
// does not match the message and the regions: a Coordinator's bug must
// not make the reconciler index out of range.
func (s *Store) checkReply(r *Reply, quotas int) error {
	if r == nil || len(r.Quotas) != quotas {
		n := 0
		if r != nil {
			n = len(r.Quotas)
		}
		return fmt.Errorf("%w: coordinator replied %d quotas to %d", ErrInvalid, n, quotas)
	}
	n := len(s.regions)
	for i, q := range r.Quotas {
		ok := len(q.Reports) == n
		for _, w := range q.Windows {
			ok = ok && len(w.Granted) == n && len(w.Debited) == n
		}
		if !ok {
			return fmt.Errorf("%w: coordinator's reply for quota %d does not list %d regions", ErrInvalid, i, n)
		}
	}
	return nil
}

// collect picks the quotas to reconcile (at most MaxKeys, those with the
// most demand), measures their demand and reads their local counts, and
// returns them with the first call's message of each. It forgets quotas
// idle for two windows.
func (s *Store) collect(ctx context.Context, now time.Time) []work {
	var all []*entry
	s.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		if s.forgets(k, e, &e.idle) {
			return true
		}
		// An idle quota is still reported (its demand is now 0) while it
		// holds more than its floor.
		i := e.b.win.index(now)
		if v := e.view.Load(); e.idle > 1 && v.of(i, e.b.floor) <= e.b.floor && v.of(i+1, e.b.floor) <= e.b.floor {
			return true
		}
		all = append(all, e)
		return true
	})
	all = s.busiest(all)
	works := make([]work, 0, len(all))
	for _, e := range all {
		b := e.b
		elapsed := s.opts.Interval
		if !e.lastTick.IsZero() && now.After(e.lastTick) {
			elapsed = now.Sub(e.lastTick)
		}
		e.lastTick = now
		rate := e.observe(e.asked.Swap(0), elapsed)
		w := b.win.index(now)
		rep := &Report{Rate: rate, Window: w}
		if used, ok := s.count(ctx, e, w); ok {
			rep.Used = max(used-e.local[w], 0)
		}
		for i := range e.local {
			if i < w-1 {
				delete(e.local, i)
			}
		}
		msg := b.quota(e.id, w)
		msg.Report, msg.Debits = rep, slices.Clone(e.pending)
		works = append(works, work{e: e, w: w, msg: msg})
	}
	return works
}

// count reads the local store's count of e's key in window w (admissions
// and local debits), without changing it.
func (s *Store) count(ctx context.Context, e *entry, w int64) (int64, bool) {
	ib, err := e.b.at(e.b.limit)
	if err != nil {
		return 0, false
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	res, err := ib.Apply(cctx, e.key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: 1, Check: true}, nil)
	if err != nil || e.b.win.index(res.At) != w {
		return 0, false
	}
	return e.b.limit - res.Remaining, true
}

// settle applies a reply: the grants it names, and the debits it
// acknowledges.
func (s *Store) settle(e *entry, q *QuotaReply) {
	e.learn(q.Windows, s.self)
	if len(q.Acked) == 0 {
		return
	}
	e.pending = slices.DeleteFunc(e.pending, func(d Debit) bool { return slices.Contains(q.Acked, d.ID) })
}

// hysteresis is the least difference between what a region holds and its
// target that moves units: 0.5% of the quota, at least one unit, so that
// noise in demand does not move units back and forth every interval.
func hysteresis(limit int64) int64 { return max(1, limit/200) }

// plan computes the region's targets for e's quota from the first call's
// reply, takes out of the local store the units to give back, and returns
// the second call's message: debits (the new ones and any not yet
// acknowledged) and raises.
func (s *Store) plan(ctx context.Context, now time.Time, wk *work) (QuotaMessage, error) {
	e, b, q := wk.e, wk.e.b, wk.reply
	cur := q.Windows[0]
	msg := b.quota(e.id, cur.Index)
	if b.win.index(now) != cur.Index || len(cur.Granted) != len(s.regions) || len(q.Reports) != len(s.regions) {
		return msg, nil // the window changed since the first call: next interval
	}
	end := b.win.start(cur.Index + 1)
	targets, err := CurrentTargets(b.limit, s.regions, cur, q.Reports, s.self, now, end.Sub(now), s.opts.Stale)
	if err != nil {
		return msg, err
	}
	held := cur.Granted[s.self] - cur.Debited[s.self]
	t, h := targets[s.self], hysteresis(b.limit)
	var err2 error
	switch {
	case t > held+h:
		msg.Raises = append(msg.Raises, Raise{Window: cur.Index, To: cur.Granted[s.self] + t - held})
	case held > t+h && now.Sub(b.win.start(cur.Index)) >= s.opts.Margin && end.Sub(now) > s.opts.Margin:
		err2 = s.debit(ctx, e, cur.Index, cur.Granted[s.self], held-t)
	}
	if end.Sub(now) <= 2*s.opts.Interval+s.opts.Margin {
		next, err := NextTargets(b.limit, s.regions, q.Reports, s.self, now, b.win.length(cur.Index+1), s.opts.Stale)
		if err != nil {
			return msg, err
		}
		if nt := next[s.self]; nt > q.Windows[1].Granted[s.self] {
			msg.Raises = append(msg.Raises, Raise{Window: cur.Index + 1, To: nt})
		}
	}
	msg.Debits = slices.Clone(e.pending)
	return msg, err2
}

// debit takes up to x units of window w out of the local store under the
// region's grant g, atomically with its admissions, and records them as a
// pending debit only when the local store certainly counted them in w: a
// timeout or an error leaves them (if taken) stranded, never reported,
// unless the local store learns that it took them and gives them back
// (floodgate.Request.UndoLate).
func (s *Store) debit(ctx context.Context, e *entry, w, g, x int64) error {
	if g < 1 {
		return nil
	}
	ib, err := e.b.at(g)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	// A debit that fails is not reported; one the local store made after
	// all (a timeout) is given back if the store learns of it (UndoLate),
	// rather than stranded.
	res, err := ib.Apply(cctx, e.key, floodgate.Request{Op: floodgate.OpTakeUpTo, N: x, UndoLate: true}, nil)
	if err != nil {
		return fmt.Errorf("region: local debit: %w", err)
	}
	if res.Granted <= 0 {
		return nil
	}
	s.stats.debits.Add(1)
	s.stats.debited.Add(res.Granted)
	if e.b.win.index(res.At) != w {
		// Counted in another window by the local store's clock: reporting
		// it for w would free units w still counts on.
		s.stats.stranded.Add(res.Granted)
		return nil
	}
	if e.local == nil {
		e.local = map[int64]int64{}
	}
	e.local[w] += res.Granted
	s.seq++
	e.pending = append(e.pending, Debit{ID: s.nonce + "-" + strconv.FormatUint(s.seq, 36), Window: w, Units: res.Granted})
	return nil
}

// crash forgets what a crashed reconciler's restart would lose: pending
// debits (their units are stranded) and the grants learned.
func (s *Store) crash() {
	s.entries.Range(func(_, v any) bool {
		e := v.(*entry)
		for _, d := range e.pending {
			s.stats.stranded.Add(d.Units)
		}
		e.pending, e.local = nil, nil
		e.view.Store(nil)
		return true
	})
}

// fresh reports whether a region's last report is recent enough to count
// its demand.
func fresh(r RegionReport, now time.Time, stale time.Duration) bool {
	return !r.At.IsZero() && now.Sub(r.At) <= stale
}

// CurrentTargets returns each region's target holding (granted − debited)
// of the current window ws of a quota of limit units, at now with rem left
// in the window: max-min fair shares of the whole window, weighted, each
// between what the region has used and its want, where its want is what
// it has used plus its reported rate times rem. A region whose report is
// older than stale (other than self) can neither give back nor take, so
// it keeps what it holds. The targets are whole units adding up to at most
// limit.
//
// FairShare is not used here: its floors are given first and the rest is
// shared, so with the units used as floors it would share only the rest
// of the window max-min, and a region asking steadily for less than its
// fair share would lose units to one that spent its own early (the
// simulator measured a region wanting 36% of the quota getting 30%).
func CurrentTargets(limit int64, regions []Region, ws WindowState, reports []RegionReport, self int, now time.Time, rem, stale time.Duration) ([]int64, error) {
	lo, hi, wt := make([]float64, len(regions)), make([]float64, len(regions)), make([]float64, len(regions))
	for s, r := range regions {
		held := float64(ws.Granted[s] - ws.Debited[s])
		rep := reports[s]
		wt[s] = weight(Claim{Weight: r.Weight})
		if s != self && !fresh(rep, now, stale) {
			lo[s], hi[s] = held, held
			continue
		}
		used := 0.0
		if rep.Window == ws.Index {
			used = min(max(float64(rep.Used), 0), held)
		}
		lo[s], hi[s] = used, used+max(rep.Rate, 0)*max(rem, 0).Seconds()
		if math.IsNaN(hi[s]) || math.IsInf(hi[s], 0) {
			return nil, fmt.Errorf("%w: region %q reports a rate of %v", ErrInvalid, r.Name, rep.Rate)
		}
	}
	return ToUnits(limit, shareBetween(float64(limit), lo, hi, wt)), nil
}

// shareBetween divides capacity into shares clamp(L·w[i], lo[i], hi[i])
// at the level L where they add up to capacity, or hi when those fit. The
// lo must add up to at most capacity. The shares add up to at most
// capacity.
func shareBetween(capacity float64, lo, hi, w []float64) []float64 {
	at := func(level float64) ([]float64, float64) {
		out, sum := make([]float64, len(lo)), 0.0
		for i := range lo {
			out[i] = min(max(level*w[i], lo[i]), max(hi[i], lo[i]))
			sum += out[i]
		}
		return out, sum
	}
	top := 0.0
	for i := range hi {
		top = max(top, max(hi[i], lo[i])/w[i])
	}
	if out, sum := at(top); sum <= capacity {
		return out
	}
	// Bisect on the level: the sum is monotone in it. 100 halvings reach
	// float64's precision.
	a, b := 0.0, top
	for range 100 {
		m := (a + b) / 2
		if _, sum := at(m); sum <= capacity {
			a = m
		} else {
			b = m
		}
	}
	out, _ := at(a)
	return out
}

// NextTargets returns each region's target grant of the next window of a
// quota of limit units per window w: the weighted fair share of the quota
// over the regions' reported rates times w, each region guaranteed its
// floor; a region whose report is older than stale (other than self) wants
// its floor only, so the others absorb the rest of its share in windows
// it has not been granted.
func NextTargets(limit int64, regions []Region, reports []RegionReport, self int, now time.Time, w, stale time.Duration) ([]int64, error) {
	claims := make([]Claim, len(regions))
	for s, r := range regions {
		f := float64(floorUnits(limit, r.Floor))
		want := f
		if s == self || fresh(reports[s], now, stale) {
			want = max(reports[s].Rate, 0) * w.Seconds()
		}
		claims[s] = Claim{Want: max(want, f), Floor: f, Weight: r.Weight}
	}
	shares, err := FairShare(float64(limit), claims)
	if err != nil {
		return nil, err
	}
	return ToUnits(limit, shares), nil
}

// rateHistory is the number of intervals the demand rate averages over.
const rateHistory = 16

// observe adds the units asked in the last interval, of length elapsed,
// to the entry's history and returns the demand rate in units per second.
//
// The rate is the average over the last rateHistory intervals, or over
// those since the demand last changed: an interval whose count is further
// from the average than Poisson noise explains (3 standard deviations,
// plus 10% and 2 units) starts the history afresh, and is itself dropped
// at the next interval, since the change happened within it. One interval alone is
// too noisy at low rates: √λI units, so 20 units per second measured over
// 1 s vary by 22%, which over the rest of a minute's window is 2.5% of a
// quota of 10,000. A step of demand is followed at once.
func (e *entry) observe(asked int64, elapsed time.Duration) float64 {
	switch {
	case e.changed:
		e.nh, e.changed = 0, false
	case e.nh > 0:
		exp := e.rate() * elapsed.Seconds()
		if math.Abs(float64(asked)-exp) > 3*math.Sqrt(exp)+0.1*exp+2 {
			e.nh, e.changed = 0, true
		}
	}
	e.hist[(e.h0+e.nh)%rateHistory] = sample{asked, elapsed}
	if e.nh < rateHistory {
		e.nh++
	} else {
		e.h0 = (e.h0 + 1) % rateHistory
	}
	if e.partial > 0 {
		// One of the first intervals a new leader measures: dropped at
		// the next, as an interval demand changed in is.
		e.partial--
		e.changed = true
	}
	return e.rate()
}

func (e *entry) rate() float64 {
	var n int64
	var d time.Duration
	for k := range e.nh {
		s := e.hist[(e.h0+k)%rateHistory]
		n, d = n+s.asked, d+s.elapsed
	}
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

type sample struct {
	asked   int64
	elapsed time.Duration
}

// space holds a call to the coordinator until it is at least Interval
// after the call before the last, so that no span of one Interval holds
// more than two of this Store's calls: alone, reconciles start Interval
// after the end of the last and never wait here; with Peers, the leader
// keeps to a schedule and its second call can come sooner after the last
// interval's than its first did, by a few milliseconds. A Manual Store
// does not wait (its clock may not be the wall's): it only records. A
// wait longer than Timeout skips the call with an error.
func (s *Store) space(ctx context.Context) error {
	now := s.opts.Now()
	if !s.opts.Manual && !s.callAt[0].IsZero() {
		if wait := s.callAt[0].Add(s.opts.Interval).Sub(now); wait > 0 {
			if wait > s.opts.Timeout {
				return fmt.Errorf("region: coordinator: a third call within one interval (%v to wait)", wait)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			now = s.opts.Now()
		}
	}
	s.callAt[0], s.callAt[1] = s.callAt[1], now
	return nil
}

// quota returns the coordinator's message about e's quota (of id) with w
// as the current window, without news.
func (b *binding) quota(id string, w int64) QuotaMessage {
	return QuotaMessage{ID: id, Limit: b.limit, Window: b.win.longest(), Indexed: b.win.fixed == 0, Index: w}
}

// forgets counts, in *idle, the intervals in a row in which e's quota was
// asked for nothing and has no debit to send, and forgets the quota (its
// entry, under key k) once that spans two of its windows: it reports
// whether it did.
func (s *Store) forgets(k any, e *entry, idle *int) bool {
	if e.asked.Load() != 0 || len(e.pending) != 0 {
		*idle = 0
		return false
	}
	*idle++
	if time.Duration(*idle)*s.opts.Interval > 2*e.b.win.longest() {
		s.entries.Delete(k)
		return true
	}
	return false
}

// busiest returns at most MaxKeys of all: those asked for most.
func (s *Store) busiest(all []*entry) []*entry {
	if len(all) > s.opts.MaxKeys {
		slices.SortFunc(all, func(a, b *entry) int { return int(min(max(b.asked.Load()-a.asked.Load(), -1), 1)) })
		all = all[:s.opts.MaxKeys]
	}
	return all
}
