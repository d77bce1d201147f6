package region

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemCoordinator is a Coordinator in process memory: for tests, the
// simulator, and regions that are processes of one machine. It keeps the
// state of the current and the previous window of each quota and forgets
// older ones. It is safe for concurrent use; the zero value is not usable:
// create one with NewMemCoordinator.
type MemCoordinator struct {
	regions []Region
	index   map[string]int

	mu     sync.Mutex // guards quotas: one Exchange at a time
	quotas map[quotaID]*ledger
}

var _ Coordinator = (*MemCoordinator)(nil)

type quotaID struct {
	id     string
	limit  int64
	window time.Duration
}

// ledger is the state of one quota.
type ledger struct {
	windows map[int64]*windowLedger
	reports []RegionReport
}

type windowLedger struct {
	granted, debited []int64 // stored grants (the floor applies on top) and debits
	applied          map[string]bool
}

// NewMemCoordinator returns a coordinator for regions, or an error
// matching ErrInvalid (see CheckRegions).
func NewMemCoordinator(regions []Region) (*MemCoordinator, error) {
	if err := CheckRegions(regions); err != nil {
		return nil, err
	}
	c := &MemCoordinator{regions: append([]Region(nil), regions...), index: map[string]int{}, quotas: map[quotaID]*ledger{}}
	for i, r := range regions {
		c.index[r.Name] = i
	}
	return c, nil
}

// Exchange applies m and returns the state after it; see Coordinator. It
// returns an error matching ErrInvalid for an unusable message, or ctx's
// error if ctx has ended before it starts.
func (c *MemCoordinator) Exchange(ctx context.Context, m *Message) (*Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := checkMessage(m, c.index)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	reply := &Reply{Quotas: make([]QuotaReply, len(m.Quotas))}
	for i, q := range m.Quotas {
		reply.Quotas[i] = c.apply(r, m.At, q)
	}
	return reply, nil
}

func (c *MemCoordinator) apply(r int, at time.Time, q QuotaMessage) QuotaReply {
	n := len(c.regions)
	id := quotaID{q.ID, q.Limit, q.Window}
	l := c.quotas[id]
	if l == nil {
		l = &ledger{windows: map[int64]*windowLedger{}, reports: make([]RegionReport, n)}
		c.quotas[id] = l
	}
	w := windowIndex(at, q.Window)
	if q.Indexed {
		w = q.Index
	}
	for i := range l.windows {
		if i < w-1 {
			delete(l.windows, i)
		}
	}
	win := func(i int64) *windowLedger {
		wl := l.windows[i]
		if wl == nil {
			wl = &windowLedger{granted: make([]int64, n), debited: make([]int64, n), applied: map[string]bool{}}
			l.windows[i] = wl
		}
		return wl
	}
	granted := func(wl *windowLedger, s int) int64 {
		return max(wl.granted[s], floorUnits(q.Limit, c.regions[s].Floor))
	}
	if q.Report != nil {
		l.reports[r] = RegionReport{Report: *q.Report, At: at}
	}
	var acked []string
	for _, d := range q.Debits {
		acked = append(acked, d.ID)
		if d.Window < w-1 || d.Window > w+1 {
			continue // its state is gone, or it cannot be (a window not yet open)
		}
		wl := win(d.Window)
		if wl.applied[d.ID] {
			continue
		}
		wl.applied[d.ID] = true
		// Recording fewer units than the region took out only strands
		// them; recording more than it holds would let the pool exceed
		// the quota.
		wl.debited[r] += min(d.Units, max(granted(wl, r)-wl.debited[r], 0))
	}
	for _, x := range q.Raises {
		if x.Window != w && x.Window != w+1 {
			continue
		}
		wl := win(x.Window)
		held := int64(0)
		for s := range n {
			held += granted(wl, s) - wl.debited[s]
		}
		if g := granted(wl, r); x.To > g {
			wl.granted[r] = g + min(x.To-g, max(q.Limit-held, 0))
		}
	}
	out := QuotaReply{Reports: append([]RegionReport(nil), l.reports...), Acked: acked}
	for k := range out.Windows {
		i := w + int64(k)
		ws := WindowState{Index: i, Granted: make([]int64, n), Debited: make([]int64, n)}
		wl := l.windows[i]
		for s := range n {
			ws.Granted[s] = floorUnits(q.Limit, c.regions[s].Floor)
			if wl != nil {
				ws.Granted[s] = granted(wl, s)
				ws.Debited[s] = wl.debited[s]
			}
		}
		out.Windows[k] = ws
	}
	return out
}

// Held returns Σ over regions of (granted − debited) units of the quota
// (id, limit, window) in window index i, as the coordinator's ledger has
// it: for tests and the simulator, which check that it never exceeds
// limit.
func (c *MemCoordinator) Held(id string, limit int64, window time.Duration, i int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var held int64
	l := c.quotas[quotaID{id, limit, window}]
	for s, r := range c.regions {
		g, d := floorUnits(limit, r.Floor), int64(0)
		if l != nil && l.windows[i] != nil {
			g, d = max(g, l.windows[i].granted[s]), l.windows[i].debited[s]
		}
		held += g - d
	}
	return held
}

// String describes the coordinator.
func (c *MemCoordinator) String() string {
	return fmt.Sprintf("MemCoordinator{%d regions}", len(c.regions))
}
