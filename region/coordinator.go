package region

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Region describes one region that shares the quotas. Every region's
// Store and the Coordinator are built with the same []Region, in the same
// order: the order is how messages and replies name regions. It is a plain
// value; the zero value has no name and is refused by CheckRegions.
type Region struct {
	// Name identifies the region: not empty, unique among the regions.
	Name string
	// Weight is the region's relative share when demand exceeds a quota:
	// at least 0 and finite; 0 means 1.
	Weight float64
	// Floor is the fraction of every quota, in [0, 1], the region holds in
	// every window whatever happens: the coordinator never hands it to
	// another region, so a region that cannot reach the coordinator
	// admits up to it once the grants it holds have ended. The floors of
	// all regions add up to at most 1. The default is 0.
	Floor float64
}

// floorUnits is region's floor of a quota of limit units, in whole units
// rounded down (so that the floors of all regions add up to at most limit).
func floorUnits(limit int64, f float64) int64 {
	return int64(math.Floor(f * float64(limit)))
}

// FloorUnits returns the region's floor of a quota of limit units: Floor
// times limit, rounded down, so that the floors of all regions add up to
// at most limit. Coordinators use it.
func (r Region) FloorUnits(limit int64) int64 { return floorUnits(limit, r.Floor) }

// WindowIndex returns the index of the window of length w that t falls
// in: windows are aligned to the Unix epoch, window i starting i·w after
// it.
func WindowIndex(t time.Time, w time.Duration) int64 { return windowIndex(t, w) }

// CheckMessage returns the index of m's region among regions, or an error
// matching ErrInvalid for a message every Coordinator refuses: nil, from
// an unknown region, or with a quota or debit out of range.
func CheckMessage(m *Message, regions []Region) (int, error) {
	index := make(map[string]int, len(regions))
	for i, r := range regions {
		index[r.Name] = i
	}
	return checkMessage(m, index)
}

// CheckRegions returns nil for a usable set of regions, and otherwise an
// error matching ErrInvalid: no region, an empty or repeated name, a weight
// or floor out of range, or floors adding up to more than 1.
func CheckRegions(regions []Region) error {
	if len(regions) == 0 {
		return fmt.Errorf("%w: no regions", ErrInvalid)
	}
	seen := make(map[string]bool, len(regions))
	floors := 0.0
	for i, r := range regions {
		switch {
		case r.Name == "":
			return fmt.Errorf("%w: region %d has no name", ErrInvalid, i)
		case seen[r.Name]:
			return fmt.Errorf("%w: region %q named twice", ErrInvalid, r.Name)
		case !(r.Weight >= 0) || math.IsInf(r.Weight, 0):
			return fmt.Errorf("%w: region %q: Weight %v is not a finite number ≥ 0", ErrInvalid, r.Name, r.Weight)
		case !(r.Floor >= 0 && r.Floor <= 1):
			return fmt.Errorf("%w: region %q: Floor %v is not in [0, 1]", ErrInvalid, r.Name, r.Floor)
		}
		seen[r.Name] = true
		floors += r.Floor
	}
	if floors > 1+1e-12 {
		return fmt.Errorf("%w: floors add up to %v, above 1", ErrInvalid, floors)
	}
	return nil
}

// Coordinator is the coordination store the regions' reconcilers share: it
// holds, per quota and window, what each region was granted and gave
// back, the transfer ids already applied and each region's last demand
// report. A Coordinator usually lives in another region than most of its
// callers: each Exchange is a cross-region call, and a reconciler makes at
// most two per interval, whatever the request rate.
//
// Contract for implementers: Exchange applies its whole Message atomically
// (no other Exchange of the same quota interleaves with it), in this order
// for each QuotaMessage: the report is stored; each debit whose transfer
// id was not applied before in its window adds its units to the region's
// debited units of that window, clamped so that the debited units never
// exceed the granted ones, and its id is remembered for as long as the
// window's state is kept; each raise lifts the region's grant of a window
// (the message's or the next) towards Raise.To by at most the units no
// region holds, so that in every window
//
//	Σ over regions of (granted − debited) ≤ Limit
//
// always holds, where a region's granted units are never below its floor
// (floorUnits of the Limit). Grants and debits only grow within a window.
// It returns the state after the message. An error means the message may
// or may not have been applied; applying it again is harmless (debits are
// idempotent by transfer id and raises name absolute targets). A
// Coordinator is safe for concurrent use. MemCoordinator and the Redis
// coordinator of package region/rediscoord implement it.
type Coordinator interface {
	Exchange(ctx context.Context, m *Message) (*Reply, error)
}

// Message is what one region tells the coordinator in one Exchange.
type Message struct {
	// Region is the sender's Region.Name.
	Region string
	// At is the sender's clock: it names the current window of each quota
	// (windows are aligned to the Unix epoch) and dates the reports.
	At time.Time
	// Quotas holds one entry per quota (limiter name and key) the message
	// is about.
	Quotas []QuotaMessage
}

// QuotaMessage is a region's news about one quota.
type QuotaMessage struct {
	// ID identifies the quota: the limiter's name and the key. The
	// coordinator keeps the state of one ID, Limit and Window apart from
	// another's, so a changed configuration starts afresh (see doc.go).
	ID string
	// Limit is the global quota, units per window: at least 1.
	Limit int64
	// Window is the window length: positive. For Indexed windows, the
	// longest window (see floodgate.CalendarWindow's Policy).
	Window time.Duration
	// Indexed, when set, names the current window by Index rather than by
	// At and Window: for windows whose lengths vary (calendar windows),
	// which At and Window cannot number. Window stays part of the quota's
	// identity and bounds how long the coordinator keeps its state.
	Indexed bool
	// Index is the index of the current window, when Indexed: windows are
	// numbered consecutively.
	Index int64
	// Report is the region's demand; nil sends none.
	Report *Report
	// Debits are units the region has taken out of its local store and
	// gives back, each under its own transfer id.
	Debits []Debit
	// Raises ask for more units.
	Raises []Raise
}

// Report is a region's demand on a quota.
type Report struct {
	// Rate is the units asked (admitted and denied) per second over the
	// region's last interval.
	Rate float64
	// Window is the index of the window Used counts: that window starts
	// Window times the quota's window length after the Unix epoch.
	Window int64
	// Used is the units the region admitted in Window so far.
	Used int64
}

// Debit gives back units of a window that the region has already taken
// out of its local store (so that it can no longer admit them).
type Debit struct {
	// ID is the transfer id: unique per debit; applying a debit twice
	// counts it once.
	ID string
	// Window is the index of the window the units belong to.
	Window int64
	// Units is the number of units, at least 1.
	Units int64
}

// Raise asks that the region's grant of a window be raised to To units in
// all (an absolute target, so a retried raise asks for nothing more). The
// coordinator raises it as far as the units no region holds allow.
type Raise struct {
	// Window is the index of the window: the message's current window or
	// the next; other windows are ignored.
	Window int64
	// To is the grant asked for, in units.
	To int64
}

// Reply is the coordinator's state of the quotas of a Message, after it.
type Reply struct {
	// Quotas has one entry per QuotaMessage, in the same order.
	Quotas []QuotaReply
}

// QuotaReply is the state of one quota.
type QuotaReply struct {
	// Windows are the message's current window and the next.
	Windows [2]WindowState
	// Reports are the last reports of the regions, in the order of the
	// []Region.
	Reports []RegionReport
	// Acked are the transfer ids of the message's debits that need no
	// resending: applied now or before, or of a window whose state is gone.
	Acked []string
}

// WindowState is the ledger of one window of a quota.
type WindowState struct {
	// Index is the window's index (its start divided by the window).
	Index int64
	// Granted and Debited hold each region's units, in the order of the
	// []Region; Granted is never below the region's floor.
	Granted, Debited []int64
}

// RegionReport is the last Report of a region, with when it was sent.
type RegionReport struct {
	Report
	// At is the sender's clock at the report; the zero time if the region
	// never reported.
	At time.Time
}

// windowIndex is the index of the window of length w that t falls in.
func windowIndex(t time.Time, w time.Duration) int64 {
	ns := t.UnixNano()
	i := ns / int64(w)
	if ns%int64(w) < 0 {
		i--
	}
	return i
}

// windowStart is the start of window i.
func windowStart(i int64, w time.Duration) time.Time {
	return time.Unix(0, i*int64(w))
}

// checkMessage validates what every Coordinator validates.
func checkMessage(m *Message, index map[string]int) (int, error) {
	if m == nil {
		return 0, fmt.Errorf("%w: nil message", ErrInvalid)
	}
	r, ok := index[m.Region]
	if !ok {
		return 0, fmt.Errorf("%w: unknown region %q", ErrInvalid, m.Region)
	}
	for _, q := range m.Quotas {
		if q.ID == "" || q.Limit < 1 || q.Window <= 0 {
			return 0, fmt.Errorf("%w: quota %q: Limit %d, Window %v", ErrInvalid, q.ID, q.Limit, q.Window)
		}
		for _, d := range q.Debits {
			if d.ID == "" || d.Units < 1 {
				return 0, fmt.Errorf("%w: quota %q: debit %q of %d units", ErrInvalid, q.ID, d.ID, d.Units)
			}
		}
	}
	return r, nil
}
