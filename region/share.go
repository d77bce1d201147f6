package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-go/floodgate"
)

// leaseIntervals is the leader's lease, in intervals. The leader renews
// it at each of its two Syncs per interval, so a live leader keeps it; a
// dead one is replaced within the lease plus an interval.
const leaseIntervals = 3

// leaderPartial is the number of intervals a new leader measures whose
// demand it uses for that interval only, rather than average with later
// ones: the other processes' counts of them can span more or less than
// the interval (a process's first Sync comes when it starts, its later
// ones on the region's schedule), by 10% at a cold start in the
// simulator, and an average over 16 intervals would keep that error for
// long.
const leaderPartial = 2

// shared is Reconcile with Options.Peers; recMu is held.
func (s *Store) shared(ctx context.Context) error {
	now := s.opts.Now()
	quotas, entries := s.peerQuotas(now)
	lead := leaseIntervals * s.opts.Interval
	reply, err := s.sync(ctx, &PeerMessage{Member: s.nonce, Lead: lead, Quotas: quotas})
	if err != nil {
		// Counted again at the next Sync. The failed one may have been
		// applied: demand is an estimate, and counting it twice only
		// asks for more than needed for an interval.
		for i, e := range entries {
			e.asked.Add(quotas[i].Asked)
		}
		s.led.Store(false)
		return err
	}
	for i, e := range entries {
		e.adopt(reply.Grants[i])
	}
	if !reply.Leader {
		s.led.Store(false)
		return nil
	}
	if !s.led.Load() {
		// Taking over: the demand drained now was counted since the last
		// drain, at an instant this process does not know, and the history
		// of its own demand is not the region's. It drops both, measures
		// for an interval before it reconciles, and uses its first
		// leaderPartial intervals' measures for one interval each.
		s.entries.Range(func(_, v any) bool {
			e := v.(*entry)
			e.lastTick, e.nh, e.changed, e.partial = now, 0, false, leaderPartial
			return true
		})
		s.led.Store(true)
		s.drained = now
		return nil
	}
	s.stats.led.Add(1)
	prev := s.drained
	s.drained = now
	s.absorb(reply.Demand, prev)
	err = s.reconcile(ctx)
	if errors.Is(err, errHook) {
		return err // crashed: nothing more
	}
	pub, err2 := s.sync(ctx, &PeerMessage{Member: s.nonce, Lead: lead, Publish: true, Grants: s.published(s.opts.Now())})
	if err2 == nil {
		s.absorb(pub.Demand, now)
	}
	if err == nil {
		err = err2
	}
	return err
}

// sync is one call to the Peers, bounded by Timeout.
func (s *Store) sync(ctx context.Context, m *PeerMessage) (*PeerReply, error) {
	s.stats.syncs.Add(1)
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	r, err := s.opts.Peers.Sync(cctx, m)
	if err == nil && (r == nil || len(r.Grants) != len(m.Quotas)) {
		err = fmt.Errorf("%w: peers replied with grants of a different number of quotas than asked", ErrInvalid)
	}
	if err != nil {
		s.stats.failedSyncs.Add(1)
		return nil, fmt.Errorf("region: peers: %w", err)
	}
	return r, nil
}

// peerQuotas returns the quotas this process sends at a Sync, with the
// units it was asked for since the last (taken from the entries), and
// their entries: at most MaxKeys, those asked for most. Quotas idle for
// two windows are forgotten.
func (s *Store) peerQuotas(now time.Time) ([]PeerQuota, []*entry) {
	var all []*entry
	s.entries.Range(func(k, v any) bool {
		e := v.(*entry)
		if !s.forgets(k, e, &e.pidle) {
			all = append(all, e)
		}
		return true
	})
	all = s.busiest(all)
	qs := make([]PeerQuota, len(all))
	for i, e := range all {
		b := e.b
		qs[i] = b.peerQuota(e.key)
		qs[i].Asked = e.asked.Swap(0)
	}
	return qs, all
}

// absorb adds the region's demand, drained by the leader, to the entries'
// units asked, binding the limiters this process has not bound yet. A
// quota new to this process is taken to have been asked for since its last
// reconcile, at last.
func (s *Store) absorb(demand []PeerQuota, last time.Time) {
	for _, q := range demand {
		b, err := s.bind(q)
		if err != nil {
			continue // a limiter this process cannot run: not ours to reconcile
		}
		k := entryKey{b, q.Key}
		v, ok := s.entries.Load(k)
		if !ok {
			v, _ = s.entries.LoadOrStore(k, &entry{b: b, key: q.Key, id: b.quotaID(q.Key), lastTick: last, partial: leaderPartial})
		}
		v.(*entry).asked.Add(q.Asked)
	}
}

// bind returns the binding of q's limiter, binding it if this process has
// not.
func (s *Store) bind(q PeerQuota) (*binding, error) {
	var alg floodgate.Algorithm = floodgate.FixedWindow{Limit: q.Limit, Window: q.Window}
	if q.Calendar != "" {
		a, err := parseCalendarTag(q.Calendar, q.Limit, true)
		if err != nil {
			return nil, err
		}
		alg = a
	}
	bd, err := s.Bind(q.Name, alg)
	if err != nil {
		return nil, err
	}
	return bd.(*binding), nil
}

// peerQuota names key's quota of b for the Peers.
func (b *binding) peerQuota(key string) PeerQuota {
	q := PeerQuota{Name: b.name, Key: key, Limit: b.limit, Window: b.win.longest()}
	if b.win.fixed == 0 {
		q.Calendar = CalendarTag(b.win.cal)
	}
	return q
}

// published returns the grants this Store knows of, for the quotas that
// hold more than their floor in the current window or a later one: what
// the leader publishes to the region's other processes.
func (s *Store) published(now time.Time) []PeerGrant {
	var out []PeerGrant
	s.entries.Range(func(_, v any) bool {
		e := v.(*entry)
		g := e.view.Load()
		if g == nil {
			return true
		}
		b := e.b
		cur := b.win.index(now)
		var ws []WindowGrant
		above := false
		for k := range g.n {
			if g.idx[k] >= cur-1 {
				ws = append(ws, WindowGrant{Window: g.idx[k], Granted: g.g[k]})
				above = above || (g.idx[k] >= cur && g.g[k] > b.floor)
			}
		}
		if above {
			q := b.peerQuota(e.key)
			out = append(out, PeerGrant{Name: q.Name, Key: q.Key, Limit: q.Limit, Window: q.Window, Calendar: q.Calendar, Windows: ws})
		}
		return len(out) < maxPeerQuotas
	})
	return out
}

// adopt merges published grants into the entry's view: per window the
// larger of what it knew and what it read (grants only grow), keeping the
// three latest windows.
func (e *entry) adopt(ws []WindowGrant) {
	if len(ws) == 0 {
		return
	}
	old := e.view.Load()
	var all []WindowGrant
	if old != nil {
		for k := range old.n {
			all = append(all, WindowGrant{Window: old.idx[k], Granted: old.g[k]})
		}
	}
	for _, w := range ws {
		if i := slices.IndexFunc(all, func(x WindowGrant) bool { return x.Window == w.Window }); i >= 0 {
			all[i].Granted = max(all[i].Granted, w.Granted)
		} else {
			all = append(all, w)
		}
	}
	slices.SortFunc(all, func(a, b WindowGrant) int { return int(min(max(b.Window-a.Window, -1), 1)) })
	nv := &grants{}
	for _, w := range all[:min(len(all), len(nv.idx))] {
		nv.idx[nv.n], nv.g[nv.n] = w.Window, w.Granted
		nv.n++
	}
	e.view.Store(nv)
}
