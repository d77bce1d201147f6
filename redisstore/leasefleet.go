package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// LeaseFleet is a lease.Fleet on Redis: the lease Stores of a fleet that
// lease from one Redis share their demand for a key through a hash beside
// the key's state (DemandKey), a field per process holding its demand and
// when Redis recorded it. Each Demand is one script call that records this
// process's demand, drops the processes not heard from within the expiry,
// and returns the others', on Redis's TIME (the processes' clocks do not
// matter). It reads the whole hash, which suits fleets of tens or hundreds
// of processes. Create one per process with Store.LeaseFleet and give it
// to lease.Options.Fleet (it implements lease.Fleet; redisstore does not
// import package lease, so that it does not link it into every program
// that uses Redis); it is safe for concurrent use.
type LeaseFleet struct {
	s      *Store
	id     string // this process's field
	expiry string // in milliseconds
}

var demandScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expiry = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. now)
redis.call('PEXPIRE', KEYS[1], expiry)
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[1] then
    local d, at = string.match(all[i + 1], '^(%S+) (%d+)$')
    if d == nil or now - tonumber(at) > expiry then
      redis.call('HDEL', KEYS[1], all[i])
    else
      out[#out + 1] = d
    end
  end
end
return out
`)

// LeaseFleet returns the LeaseFleet of this process, with a random id of
// its own: a process that stops recording (killed, cut off, or whose key
// went idle) drops out of the others' view expiry after its last record;
// give a few of lease.Options.FleetInterval (the default, 1s, calls for 3s
// or so). Demand is bounded by the Store's Timeout as well as its context,
// but not by its breakers or failure policy: a failed call returns an error
// matching floodgate.ErrUnavailable, and the lease Store keeps its last
// share. Options.Observer's OnStoreCall sees each round trip, carrying no
// decision. It returns an error matching ErrInvalidOptions for an expiry
// below MinFleetExpiry.
func (s *Store) LeaseFleet(expiry time.Duration) (*LeaseFleet, error) {
	if expiry < MinFleetExpiry {
		return nil, fmt.Errorf("%w: lease fleet expiry %v is below %v", ErrInvalidOptions, expiry, MinFleetExpiry)
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("redisstore: lease fleet id: %w", err)
	}
	return &LeaseFleet{s: s, id: hex.EncodeToString(b[:]), expiry: strconv.FormatInt(expiry.Milliseconds(), 10)}, nil
}

// DemandKey returns the Redis key of the hash in which a LeaseFleet keeps
// the demands for key of the limiter named name: Prefix + "{" + key + "}:"
// + name + ":dm", beside the key's state on its Cluster slot. The suffix
// ":dm" is no algorithm's, nor InflightKey's.
func (s *Store) DemandKey(name, key string) string {
	return s.prefix + "{" + s.hashed(key) + "}:" + name + ":dm"
}

// Demand implements lease.Fleet. It returns the errors of
// floodgate.CheckName and floodgate.CheckKey for a name or key no limiter
// accepts, one matching ErrInvalidOptions for a demand that is not a
// finite number ≥ 0, one matching floodgate.ErrUnavailable
// when Redis fails, and one matching ErrReply for a reply it cannot read
// (a field another program wrote, say).
func (f *LeaseFleet) Demand(ctx context.Context, name, key string, demand float64) ([]float64, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	if err := floodgate.CheckKey(key); err != nil {
		return nil, err
	}
	if err := checkDemand(demand); err != nil {
		return nil, err
	}
	if f.s.timeout != NoTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.s.timeout)
		defer cancel()
	}
	res, err := f.s.runOwn(ctx, demandScript, f.s.DemandKey(name, key),
		f.id, strconv.FormatFloat(demand, 'g', -1, 64), f.expiry).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("%w: lease fleet demand: %w", floodgate.ErrUnavailable, err)
	}
	others := make([]float64, len(res))
	for i, v := range res {
		d, err := strconv.ParseFloat(v, 64)
		if err == nil {
			err = checkDemand(d)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: lease fleet demand %q: %v", ErrReply, v, err)
		}
		others[i] = d
	}
	return others, nil
}

// checkDemand returns an error matching ErrInvalidOptions unless demand is
// a finite number ≥ 0 (the rule of package lease).
func checkDemand(demand float64) error {
	if !(demand >= 0) || math.IsInf(demand, 0) {
		return fmt.Errorf("%w: a demand must be a finite number ≥ 0, got %v", ErrInvalidOptions, demand)
	}
	return nil
}
