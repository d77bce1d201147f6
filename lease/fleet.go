package lease

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/region"
)

// Fleet shares the demand of the processes that lease one limiter's keys,
// so that each sizes its pools by its share of Options.FleetBatch rather
// than by who refills first (see Options.Fleet). A Fleet is shared by the
// lease Stores of every process of the fleet: redisstore's
// Store.LeaseFleet keeps it in the Redis they lease from, MemFleet in one
// process.
type Fleet interface {
	// Demand records demand, this process's demand for the key of the
	// limiter named name in units per second, and returns the demands the
	// other processes of the fleet recorded for it and still hold (each
	// record lives for a period of the Fleet's choosing, a few of
	// Options.FleetInterval). It is called at most once per FleetInterval
	// per key, from the goroutine of a refill, never on a decision's path.
	//
	// The record is per limiter name and key: limiters of one name bound
	// to one lease Store with different algorithms (which have pools of
	// their own) record over each other and size by a mixed demand: give
	// them different names.
	Demand(ctx context.Context, name, key string, demand float64) (others []float64, err error)
}

// MemFleet is a Fleet of lease Stores in one process: tests, simulations,
// and a binary that runs several Stores over one remote. Records live for
// TTL on the clock Now. It is safe for concurrent use.
type MemFleet struct {
	mu      sync.Mutex
	ttl     time.Duration
	now     func() time.Time
	records map[fleetKey]map[*memMember]memRecord
	// calls counts Demand calls: every sweepEvery-th drops the expired
	// records of every key, so that keys no one records any more do not
	// pile up.
	calls int
}

// sweepEvery is how many Demand calls a MemFleet makes between sweeps of
// every key; a sweep costs about as many steps as records, so a call costs
// O(1) amortized while the records are of the order of sweepEvery.
const sweepEvery = 1024

type fleetKey struct{ name, key string }

type memRecord struct {
	demand float64
	until  time.Time
}

// memMember is one Store's view of a MemFleet.
type memMember struct{ f *MemFleet }

// NewMemFleet returns a MemFleet whose records live for ttl (at least one
// nanosecond) on the clock now (nil means time.Now).
func NewMemFleet(ttl time.Duration, now func() time.Time) (*MemFleet, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("%w: MemFleet's ttl must be positive, got %v", ErrInvalidOptions, ttl)
	}
	if now == nil {
		now = time.Now
	}
	return &MemFleet{ttl: ttl, now: now, records: map[fleetKey]map[*memMember]memRecord{}}, nil
}

// Member returns a Fleet for one process's Store: the members of a
// MemFleet see each other's demands.
func (f *MemFleet) Member() Fleet { return &memMember{f: f} }

// Demand implements Fleet.
func (m *memMember) Demand(_ context.Context, name, key string, demand float64) ([]float64, error) {
	if err := checkDemand(demand); err != nil {
		return nil, err
	}
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	k := fleetKey{name, key}
	recs := f.records[k]
	if recs == nil {
		recs = map[*memMember]memRecord{}
		f.records[k] = recs
	}
	recs[m] = memRecord{demand: demand, until: now.Add(f.ttl)}
	if f.calls++; f.calls%sweepEvery == 0 {
		f.sweepLocked(now, k)
	}
	var others []float64
	for o, r := range recs {
		switch {
		case !now.Before(r.until):
			delete(recs, o)
		case o != m:
			others = append(others, r.demand)
		}
	}
	return others, nil
}

// sweepLocked drops the records expired at now, and the keys left with
// none, except keep's.
func (f *MemFleet) sweepLocked(now time.Time, keep fleetKey) {
	for k, recs := range f.records {
		for m, r := range recs {
			if !now.Before(r.until) {
				delete(recs, m)
			}
		}
		if len(recs) == 0 && k != keep {
			delete(f.records, k)
		}
	}
}

// checkDemand returns an error matching ErrInvalidOptions unless demand is
// a finite number ≥ 0: what a Fleet records and returns.
func checkDemand(demand float64) error {
	if !(demand >= 0) || math.IsInf(demand, 0) {
		return fmt.Errorf("%w: a demand must be a finite number ≥ 0, got %v", ErrInvalidOptions, demand)
	}
	return nil
}

// fleetShare returns the most units a process of the fleet may hold for a
// key (its pool and its refill in flight): its fair share (region.FairShare,
// water-filling) of budget units among the processes' claims, plus an
// equal part of what the claims leave. A process's claim is what its
// demand (units per ns) consumes in two TargetIntervals: a batch, and the
// rest of the previous one that a pool still holds when it refills. With
// every process computing from the same demands the shares add up to
// budget; each is at least minBatch, so that a process can always lease.
func fleetShare(budget, minBatch int64, target float64, self float64, others []float64) int64 {
	claims := make([]region.Claim, 0, 1+len(others))
	claims = append(claims, region.Claim{Want: self * 2 * target})
	for _, d := range others {
		claims = append(claims, region.Claim{Want: d * 2 * target})
	}
	shares, err := region.FairShare(float64(budget), claims)
	if err != nil {
		// Not reached: the demands were checked and the budget is a
		// positive count of units.
		return max(budget/int64(len(claims)), minBatch)
	}
	spare := float64(budget)
	for _, s := range shares {
		spare -= s
	}
	got := math.Floor(shares[0] + max(spare, 0)/float64(len(claims)))
	return max(min(int64(got), budget), minBatch)
}

// shareFleet records e's demand with the Fleet and sets e.share from the
// fleet's demands, if FleetInterval has passed since the last time; it runs
// on a refill's goroutine, after the refill's callers were woken.
func (l *binding) shareFleet(e *entry, now int64) {
	e.mu.Lock()
	if e.sharing || (e.sharedAt != 0 && now-e.sharedAt < l.cfg.fleetInterval) || e.dead {
		e.mu.Unlock()
		return
	}
	e.sharing = true
	held := int64(0)
	if p := e.pool.Load(); p != nil {
		held = p.left.Load()
	}
	out := e.leased - e.dropped - held
	wanted := out + e.denied.Load()
	// The first record of a key carries the consumption rate its refills
	// measured, if any: its demand is measured from here on. Its share is
	// not applied, since it rests on no measured demand: a newcomer to a
	// busy fleet would otherwise be held to MinBatch, a round trip a
	// decision, until the next record.
	first := e.sharedAt == 0
	demand := e.rate
	if !first && now > e.sharedAt {
		demand = float64(wanted-e.shareMark) / float64(now-e.sharedAt)
	}
	demand = max(demand, 0)
	e.shareMark, e.sharedAt = wanted, now
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
	others, err := l.cfg.fleet.Demand(ctx, l.name, e.key, demand*float64(time.Second))
	cancel()
	if err == nil {
		for _, d := range others {
			if checkDemand(d) != nil {
				err = fmt.Errorf("%w: the Fleet returned the demand %v", floodgate.ErrUnavailable, d)
				break
			}
		}
	}
	share := int64(0)
	if err == nil {
		perNs := make([]float64, len(others))
		for i, d := range others {
			perNs[i] = d / float64(time.Second)
		}
		share = fleetShare(l.cfg.fleetBatch, l.cfg.minBatch, float64(l.cfg.targetInterval), demand, perNs)
	}
	e.mu.Lock()
	e.sharing = false
	if err == nil {
		if !first {
			e.share = share
		}
		l.s.shares.Add(1)
	} else {
		// The last share stands; a failing Fleet is asked again at the
		// next interval.
		l.s.shareErrors.Add(1)
	}
	e.mu.Unlock()
}
