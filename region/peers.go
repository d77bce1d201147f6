package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Peers lets the processes of one region share one reconciler. Every
// process of the region runs its own Store on the region's local store,
// with the region's name and one Peers that they all reach (for Redis,
// rediscoord.NewPeers on the region's Redis). Once per interval each Store
// calls Sync: it adds the units its process was asked for to the
// region's demand and learns the grants the region holds. One Store, the
// leader, also reconciles for the whole region: with the demand of every
// process, it makes the region's one or two calls to the coordinator and
// publishes the grants it learned to the others. So a region makes at
// most two cross-region calls per interval whatever the number of its
// processes, and the coordinator sees the region's whole demand.
//
// Contract for implementers: Sync applies its whole PeerMessage atomically
// (no other Sync of the same region interleaves with it), in this order:
//
//  1. the lease: when no member leads (no lease, or the last one ended)
//     or the sender leads, and Lead is positive, the sender leads for
//     Lead from now; when the sender leads and Lead is 0, no one leads;
//  2. each PeerQuota's Asked units are added to the region's demand of
//     that quota;
//  3. when the sender leads and Publish is set, the published grants
//     become Grants (replacing all earlier ones);
//  4. the reply names whether the sender leads, the published grants of
//     each of the message's quotas, and, when the sender leads, the
//     region's demand since the last Sync that drained it, which this
//     Sync drains.
//
// An error means the message may or may not have been applied. A Peers is
// safe for concurrent use. MemPeers and rediscoord's Peers implement it.
//
// Leadership is an optimization, not a guarantee the protocol rests on:
// two Stores that both reconcile (a leader stalled past its lease and a
// new one) stay safe, as any Stores of one region do (the local count is
// shared and every debit has its own transfer id); they only make more
// calls in those intervals. Published grants only ever lower what a
// process admits below what it is granted (grants only grow within a
// window, and a process takes the larger of what it knows and what it
// reads), so stale or lost grants never over-admit.
type Peers interface {
	Sync(ctx context.Context, m *PeerMessage) (*PeerReply, error)
}

// PeerMessage is what one process of a region tells its Peers.
type PeerMessage struct {
	// Member identifies the sending Store: unique among the region's
	// processes (a Store draws its own at New).
	Member string
	// Lead is how long the sender asks to lead from now; 0 gives the
	// lead up.
	Lead time.Duration
	// Quotas are the quotas the sender wants the grants of, with the
	// units its process was asked for since its last Sync.
	Quotas []PeerQuota
	// Publish, from the leader, replaces the published grants by Grants.
	Publish bool
	Grants  []PeerGrant
}

// PeerQuota names one quota (limiter name, key and FixedWindow or
// CalendarWindow) and carries units asked of it.
type PeerQuota struct {
	Name, Key string
	Limit     int64
	// Window is a FixedWindow's Window, or a CalendarWindow's longest
	// (its Policy's Window).
	Window time.Duration
	// Calendar is "" for a FixedWindow; for a CalendarWindow, the rest of
	// its configuration (CalendarTag).
	Calendar string
	// Asked is units asked (admitted or denied): at least 0.
	Asked int64
}

// PeerGrant is what the region was granted of one quota, as its leader
// knows it.
type PeerGrant struct {
	Name, Key string
	Limit     int64
	Window    time.Duration
	Calendar  string // as PeerQuota's
	Windows   []WindowGrant
}

// WindowGrant is a region's grant of one window of a quota.
type WindowGrant struct {
	// Window is the window's index (its start divided by its length).
	Window int64
	// Granted is the units granted to the region in it.
	Granted int64
}

// PeerReply is a Peers' answer to a PeerMessage.
type PeerReply struct {
	// Leader reports whether the sender leads after the message.
	Leader bool
	// Grants holds the published grants of each of the message's Quotas,
	// in order; nil for a quota with none.
	Grants [][]WindowGrant
	// Demand is, for the leader, the units asked of each quota by every
	// process of the region since the demand was last drained: the
	// sender's own units of this message included; in no particular order.
	Demand []PeerQuota
}

// maxPeerQuotas bounds the quotas of one PeerMessage, so that one Sync
// is bounded work.
const maxPeerQuotas = 100_000

// CheckPeerMessage returns nil for a message every Peers accepts, and
// otherwise an error matching ErrInvalid: nil, no member, a negative
// lease, too many quotas, or a quota or grant that is not a usable
// limiter name, key and FixedWindow, or asks for a negative number of
// units.
func CheckPeerMessage(m *PeerMessage) error {
	if m == nil {
		return fmt.Errorf("%w: nil peer message", ErrInvalid)
	}
	if m.Member == "" || m.Lead < 0 {
		return fmt.Errorf("%w: peer message from %q with lease %v", ErrInvalid, m.Member, m.Lead)
	}
	if len(m.Quotas) > maxPeerQuotas || len(m.Grants) > maxPeerQuotas {
		return fmt.Errorf("%w: peer message of %d quotas and %d grants, above %d", ErrInvalid, len(m.Quotas), len(m.Grants), maxPeerQuotas)
	}
	check := func(name, key string, limit int64, w time.Duration, cal string) error {
		if err := floodgate.CheckName(name); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := floodgate.CheckKey(key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if cal != "" {
			if _, err := parseCalendarTag(cal, limit, false); err != nil {
				return err
			}
		} else if err := (floodgate.FixedWindow{Limit: limit, Window: w}).Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if w <= 0 {
			return fmt.Errorf("%w: window %v", ErrInvalid, w)
		}
		return nil
	}
	for _, q := range m.Quotas {
		if err := check(q.Name, q.Key, q.Limit, q.Window, q.Calendar); err != nil {
			return err
		}
		if q.Asked < 0 {
			return fmt.Errorf("%w: quota %q: %d units asked", ErrInvalid, q.Key, q.Asked)
		}
	}
	for _, g := range m.Grants {
		if err := check(g.Name, g.Key, g.Limit, g.Window, g.Calendar); err != nil {
			return err
		}
		if len(g.Windows) > 3 {
			return fmt.Errorf("%w: quota %q: grants of %d windows, above 3", ErrInvalid, g.Key, len(g.Windows))
		}
		for _, w := range g.Windows {
			if w.Granted < 0 {
				return fmt.Errorf("%w: quota %q: a grant of %d units", ErrInvalid, g.Key, w.Granted)
			}
		}
	}
	return nil
}

// MemPeers is a Peers in process memory: for tests, the simulator, and a
// region whose processes are goroutines of one program. It is safe for
// concurrent use; the zero value is not usable: create one with
// NewMemPeers.
type MemPeers struct {
	now func() time.Time

	mu     sync.Mutex
	leader string
	until  time.Time
	demand map[peerKey]int64
	grants map[peerKey][]WindowGrant
}

var _ Peers = (*MemPeers)(nil)

type peerKey struct {
	name, key string
	limit     int64
	window    time.Duration
	calendar  string
}

// NewMemPeers returns a MemPeers whose leases run on now (time.Now when
// nil).
func NewMemPeers(now func() time.Time) *MemPeers {
	if now == nil {
		now = time.Now
	}
	return &MemPeers{now: now, demand: map[peerKey]int64{}, grants: map[peerKey][]WindowGrant{}}
}

// Sync applies m and answers it; see Peers. It returns an error matching
// ErrInvalid for a message CheckPeerMessage refuses, or ctx's error if
// ctx has ended before it starts.
func (p *MemPeers) Sync(ctx context.Context, m *PeerMessage) (*PeerReply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckPeerMessage(m); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.leader != "" && !now.Before(p.until) {
		p.leader = ""
	}
	switch {
	case m.Lead > 0 && (p.leader == "" || p.leader == m.Member):
		p.leader, p.until = m.Member, now.Add(m.Lead)
	case m.Lead == 0 && p.leader == m.Member:
		p.leader = ""
	}
	leads := p.leader == m.Member
	for _, q := range m.Quotas {
		if q.Asked > 0 {
			p.demand[peerKey{q.Name, q.Key, q.Limit, q.Window, q.Calendar}] += q.Asked
		}
	}
	if leads && m.Publish {
		p.grants = make(map[peerKey][]WindowGrant, len(m.Grants))
		for _, g := range m.Grants {
			p.grants[peerKey{g.Name, g.Key, g.Limit, g.Window, g.Calendar}] = append([]WindowGrant(nil), g.Windows...)
		}
	}
	r := &PeerReply{Leader: leads, Grants: make([][]WindowGrant, len(m.Quotas))}
	for i, q := range m.Quotas {
		if g := p.grants[peerKey{q.Name, q.Key, q.Limit, q.Window, q.Calendar}]; g != nil {
			r.Grants[i] = append([]WindowGrant(nil), g...)
		}
	}
	if leads {
		for k, n := range p.demand {
			r.Demand = append(r.Demand, PeerQuota{Name: k.name, Key: k.key, Limit: k.limit, Window: k.window, Calendar: k.calendar, Asked: n})
		}
		clear(p.demand)
		slices.SortFunc(r.Demand, func(a, b PeerQuota) int {
			return comparePeerQuotas(a, b)
		})
	}
	return r, nil
}

// comparePeerQuotas orders PeerQuotas by name, key, limit, window and
// calendar: the order of MemPeers' Demand, for simulations that repeat.
func comparePeerQuotas(a, b PeerQuota) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Limit, b.Limit),
		cmp.Compare(a.Window, b.Window), cmp.Compare(a.Calendar, b.Calendar))
}

// CalendarTag returns PeerQuota.Calendar of a CalendarWindow: its unit,
// week start, reset offset in seconds and time zone name, such as
// "month/0/3600/Europe/Paris". Processes that share quotas must name
// their zones (time.LoadLocation), not use time.Local.
func CalendarTag(a floodgate.CalendarWindow) string {
	loc := "UTC"
	if a.Location != nil {
		loc = a.Location.String()
	}
	return fmt.Sprintf("%v/%d/%d/%s", a.Unit, int(a.WeekStart), int64(a.Offset/time.Second), loc)
}

// parseCalendarTag inverts CalendarTag for a quota of limit units; with
// load, it loads the time zone, else it checks the syntax only.
func parseCalendarTag(tag string, limit int64, load bool) (floodgate.CalendarWindow, error) {
	parts := strings.SplitN(tag, "/", 4)
	bad := func(err error) (floodgate.CalendarWindow, error) {
		return floodgate.CalendarWindow{}, fmt.Errorf("%w: calendar %q: %w", ErrInvalid, tag, err)
	}
	if len(parts) != 4 || parts[3] == "" {
		return bad(errors.New("not unit/weekstart/offset/zone"))
	}
	a := floodgate.CalendarWindow{Limit: limit}
	for u := floodgate.Day; u <= floodgate.Year; u++ {
		if u.String() == parts[0] {
			a.Unit = u
		}
	}
	ws, err1 := strconv.Atoi(parts[1])
	off, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return bad(err)
	}
	if off < 0 || off >= 86400 || ws < 0 || ws > 6 {
		return bad(errors.New("week start or offset out of range"))
	}
	a.WeekStart, a.Offset = time.Weekday(ws), time.Duration(off)*time.Second
	if load {
		loc, err := time.LoadLocation(parts[3])
		if err != nil {
			return bad(err)
		}
		a.Location = loc
	}
	if err := a.Validate(); err != nil {
		return bad(err)
	}
	return a, nil
}
