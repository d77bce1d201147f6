package lease

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/observe"
)

// Defaults of Options.
const (
	// DefaultMinBatch is the default of Options.MinBatch.
	DefaultMinBatch = 1
	// DefaultMaxBatchDivisor sets the default of Options.MaxBatch: the
	// remote's quota divided by 16, rounded up, so that 16 processes holding
	// full pools of one key hold at most one quota between them.
	DefaultMaxBatchDivisor = 16
	// DefaultLowWater is the default of Options.LowWater.
	DefaultLowWater = 0.5
	// DefaultTargetInterval is the default of Options.TargetInterval.
	DefaultTargetInterval = 100 * time.Millisecond
	// DefaultTTL is the default of Options.TTL.
	DefaultTTL = time.Second
	// DefaultTimeout is the default of Options.Timeout.
	DefaultTimeout = time.Second
	// DefaultFleetInterval is the default of Options.FleetInterval.
	DefaultFleetInterval = time.Second
)

// Options configures a Store. A nil *Options means the defaults; so does
// the zero value of each field.
type Options struct {
	// MinBatch is the fewest units a refill asks for. The default is 1. It
	// must not be above MaxBatch when that is set, nor above the quota of
	// any algorithm bound to the Store: Bind refuses one with a smaller
	// quota.
	MinBatch int64

	// MaxBatch is the most units a pool of one key holds, leased or in
	// flight, in units; it bounds both the quota one idle process can hoard
	// and the under-admission it can cause, per key of each limiter. The
	// default is each limiter's quota divided by 16, rounded up, and at
	// least MinBatch. Values above the quota are treated as the quota.
	// Requests of more than MaxBatch units go to the remote.
	MaxBatch int64

	// LowWater is the fraction of the current batch size, in (0, 1], below
	// which a decision that takes units from a pool starts a refill in the
	// background. The default is 0.5: a refill starts when half the batch
	// is left, which hides round trips up to half of TargetInterval.
	LowWater float64

	// TargetInterval sets the adaptive batch size: a refill asks for about
	// the units this process consumed for the key in the last
	// TargetInterval, within MinBatch and MaxBatch. The default is 100ms.
	// Longer intervals mean fewer round trips and more units held locally.
	TargetInterval time.Duration

	// TTL is how long leased units stay usable after the round trip that
	// leased them, so that an idle process does not hoard quota; a refill
	// extends the life of the units still in the pool. Unused units are
	// given back when it ends, where the algorithm allows. A background
	// goroutine ends leases at their TTL, late by as much as the scheduler
	// delays it; that costs only hoarding, never the bound. The fixed and
	// sliding window also end leases at the end of the remote's window,
	// which every decision checks (see the package doc). The default is 1s.
	TTL time.Duration

	// Timeout bounds each round trip the Store makes on its own behalf:
	// refills and the refunds of expired or closed pools. A caller waiting
	// for a refill is bounded by its own context as well. The default is
	// 1s; the remote store's own timeout (redisstore's is 20ms) is usually
	// shorter.
	Timeout time.Duration

	// Now is the local clock of lease expiry, read once per decision of a
	// fixed or sliding window and once per refill. It must not go
	// backwards; a reading before the round trip that leased a pool
	// expires that pool. The default is a monotonic clock (the wall
	// clock at New plus the monotonic time elapsed since), immune to steps
	// of the wall clock. Only durations measured on this clock matter: the
	// remote's clock (Redis' TIME) need not agree with it. The background
	// expiry sleeps on real timers, so with a virtual Now it runs on real
	// time; tests use testing/synctest instead.
	Now func() time.Time

	// Observer receives every lease round trip (OnLease: the units asked
	// for and granted, its latency on Now's clock, and the decisions served
	// locally and waited since the key's previous one, whose ratio is the
	// local hit ratio) and every return of unused units (OnReturn), whose
	// Reason is "expired" (the units outlived TTL or the remote window they
	// were counted in), "replaced" (a lease counted in a later window of
	// the remote replaced them) or "closed" (Close, or a lease that landed
	// after its key was forgotten). Both are called on the goroutine that
	// made the round trip (a refill's own, Close's, or the expiry's), with
	// context.Background() since it serves no one caller, and never under
	// a lock of the Store: they may call it (Stats, for example). Each
	// event's Name is the name of the limiter whose key it is. The default
	// (nil) reports nothing. Its other fields do not apply: wrap the Store
	// with observe.Store to see its decisions.
	Observer *observe.Observer

	// Fleet, when set, sizes each key's pool by this process's share of
	// the fleet's demand rather than by who refills first: the processes
	// record their demand for the key (units consumed and denied per
	// second) with the Fleet, at most once per FleetInterval from a
	// refill's goroutine, and each then holds at most its fair share
	// (water-filling, region.FairShare) of FleetBatch units, at least
	// MinBatch and at most MaxBatch. A process whose demand fits in its
	// share gets all of it; the busier ones share the rest equally, and
	// what no one claims is split evenly (see the package doc, "A fleet").
	// Until a key's second record (a FleetInterval after its first
	// refill), and while the Fleet fails, its pool is sized as without
	// one. It costs a Fleet call (a script call on Redis) per key per
	// FleetInterval for every key that refills in it: on a limiter of many
	// keys that each refill less than once per FleetInterval (per-user
	// limits), that doubles the round trips, so give a Fleet to a Store of
	// global or per-tenant limits.
	// Use redisstore's Store.LeaseFleet for a fleet that leases from one
	// Redis, NewMemFleet for Stores in one process. The default (nil)
	// sizes pools by local demand alone, up to MaxBatch.
	Fleet Fleet

	// FleetBatch is the most units the pools of one key hold across the
	// fleet, with a Fleet: the shares add up to it when the processes see
	// the same demands. The default is each limiter's quota divided by 16,
	// rounded up, and at least MinBatch: what one process holds by default
	// without a Fleet. Values above the quota are treated as the quota.
	FleetBatch int64

	// FleetInterval is how often a key's demand is shared with the Fleet;
	// only keys that refill share it. The default is 1s.
	FleetInterval time.Duration
}

// config is Options resolved: by New for the Store (minBatch and maxBatch
// as set, 0 meaning the default), and by Bind for each binding, against
// its algorithm's quota.
type config struct {
	minBatch       int64
	maxBatch       int64
	lowWater       float64
	targetInterval int64 // ns
	ttl            int64 // ns
	timeout        time.Duration
	userNow        func() time.Time // Options.Now; nil for the monotonic clock
	base           time.Time        // the monotonic clock's origin
	baseNs         int64
	onLease        func(context.Context, observe.Lease)  // nil: none
	onReturn       func(context.Context, observe.Return) // nil: none
	fleet          Fleet                                 // nil: none
	fleetBatch     int64
	fleetInterval  int64 // ns
}

// resolve validates o and fills in the defaults that depend on no quota;
// MinBatch and MaxBatch are resolved per quota by forQuota.
func (o *Options) resolve() (config, error) {
	var v Options
	if o != nil {
		v = *o
	}
	switch {
	case v.MinBatch < 0:
		return config{}, fmt.Errorf("%w: MinBatch must not be negative, got %d", ErrInvalidOptions, v.MinBatch)
	case v.MaxBatch < 0:
		return config{}, fmt.Errorf("%w: MaxBatch must not be negative, got %d", ErrInvalidOptions, v.MaxBatch)
	case v.MaxBatch > 0 && v.MinBatch > v.MaxBatch:
		return config{}, fmt.Errorf("%w: MinBatch %d is above MaxBatch %d", ErrInvalidOptions, v.MinBatch, v.MaxBatch)
	case math.IsNaN(v.LowWater) || v.LowWater < 0 || v.LowWater > 1:
		return config{}, fmt.Errorf("%w: LowWater must be in (0, 1], got %v", ErrInvalidOptions, v.LowWater)
	case v.TargetInterval < 0:
		return config{}, fmt.Errorf("%w: TargetInterval must not be negative, got %v", ErrInvalidOptions, v.TargetInterval)
	case v.TTL < 0:
		return config{}, fmt.Errorf("%w: TTL must not be negative, got %v", ErrInvalidOptions, v.TTL)
	case v.Timeout < 0:
		return config{}, fmt.Errorf("%w: Timeout must not be negative, got %v", ErrInvalidOptions, v.Timeout)
	case v.FleetBatch < 0:
		return config{}, fmt.Errorf("%w: FleetBatch must not be negative, got %d", ErrInvalidOptions, v.FleetBatch)
	case v.FleetBatch > 0 && v.MinBatch > v.FleetBatch:
		return config{}, fmt.Errorf("%w: MinBatch %d is above FleetBatch %d", ErrInvalidOptions, v.MinBatch, v.FleetBatch)
	case v.FleetInterval < 0:
		return config{}, fmt.Errorf("%w: FleetInterval must not be negative, got %v", ErrInvalidOptions, v.FleetInterval)
	case v.Fleet == nil && (v.FleetBatch != 0 || v.FleetInterval != 0):
		return config{}, fmt.Errorf("%w: FleetBatch and FleetInterval need a Fleet", ErrInvalidOptions)
	}
	if err := v.Observer.Validate(); err != nil {
		// Both ErrInvalidOptions and the Observer's ErrInvalidConfig match.
		return config{}, fmt.Errorf("%w: Observer: %w", ErrInvalidOptions, err)
	}
	c := config{
		minBatch:       v.MinBatch,
		maxBatch:       v.MaxBatch,
		lowWater:       v.LowWater,
		targetInterval: int64(v.TargetInterval),
		ttl:            int64(v.TTL),
		timeout:        v.Timeout,
		fleet:          v.Fleet,
		fleetBatch:     v.FleetBatch,
		fleetInterval:  int64(v.FleetInterval),
	}
	if v.Observer != nil {
		c.onLease, c.onReturn = v.Observer.OnLease, v.Observer.OnReturn
	}
	if c.minBatch == 0 {
		c.minBatch = DefaultMinBatch
	}
	if c.lowWater == 0 {
		c.lowWater = DefaultLowWater
	}
	if c.targetInterval == 0 {
		c.targetInterval = int64(DefaultTargetInterval)
	}
	if c.ttl == 0 {
		c.ttl = int64(DefaultTTL)
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	if c.fleetInterval == 0 {
		c.fleetInterval = int64(DefaultFleetInterval)
	}
	c.userNow = v.Now
	c.base = time.Now()
	c.baseNs = c.base.UnixNano()
	return c, nil
}

// forQuota returns c, the Store's config, resolved for an algorithm of
// quota units: MaxBatch (and FleetBatch) default to the quota divided by
// DefaultMaxBatchDivisor, rounded up, and at least MinBatch; all three are
// at most the quota. It returns an error matching ErrInvalidOptions and
// floodgate.ErrInvalidConfig (the Store cannot run the algorithm) when
// MinBatch is above the quota.
func (c config) forQuota(quota int64) (config, error) {
	if c.minBatch > quota {
		return config{}, fmt.Errorf("%w: %w: MinBatch %d is above the quota %d", ErrInvalidOptions, floodgate.ErrInvalidConfig, c.minBatch, quota)
	}
	// quota/d rounded up, without overflowing near math.MaxInt64.
	def := quota / DefaultMaxBatchDivisor
	if quota%DefaultMaxBatchDivisor != 0 {
		def++
	}
	def = max(def, c.minBatch)
	if c.maxBatch == 0 {
		c.maxBatch = def
	}
	c.maxBatch = min(c.maxBatch, quota)
	if c.fleetBatch == 0 {
		c.fleetBatch = def
	}
	c.fleetBatch = min(c.fleetBatch, quota)
	return c, nil
}

// now reads the local clock in ns. The default reads only the monotonic
// clock with time.Since, which costs about half of time.Now and never
// steps; calling it directly rather than through a func value keeps a
// window decision's clock read as cheap as it can be.
func (c *config) now() int64 {
	if c.userNow != nil {
		return c.userNow().UnixNano()
	}
	return c.baseNs + int64(time.Since(c.base))
}
