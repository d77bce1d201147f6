package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive/shed"
)

// MinFleetExpiry is the least expiry of a FleetSource.
const MinFleetExpiry = time.Millisecond

// FleetSource is a shed.FleetSource on Redis: the processes of a fleet
// share their load through one hash, a field per process holding its
// load and when Redis recorded it, and each Exchange is one script call
// that records this process's load, drops the processes not heard from
// within the expiry, and sums the rest, on Redis's TIME (the processes'
// clocks do not matter). It reads the whole hash, which suits fleets of
// tens or hundreds of processes. Create one with Store.FleetSource; it is
// safe for concurrent use, and a shed.Fleet never calls it concurrently.
type FleetSource struct {
	s      *Store
	key    string // the fleet's hash
	id     string // this process's field
	expiry string // in milliseconds
}

var fleetScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. now)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local inflight, capacity = 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f, c, at = string.match(all[i + 1], '(%S+) (%S+) (%S+)')
  if f == nil or now - tonumber(at) > tonumber(ARGV[4]) then
    redis.call('HDEL', KEYS[1], all[i])
  else
    inflight, capacity = inflight + tonumber(f), capacity + tonumber(c)
  end
end
return {tostring(inflight), tostring(capacity)}
`)

// FleetSource returns the FleetSource of the fleet named fleet for this
// process: its hash is FleetKey(fleet), and a process that stops
// exchanging (killed, cut off) drops out of the sum expiry after its last
// exchange (give a few of the shed.Fleet's Intervals). Each FleetSource
// is one process of the fleet, with a random id of its own.
//
// An Exchange is bounded by the Store's Timeout as well as its context,
// through the Store's client (which honours contexts, unless the Store
// was given a UniversalClient of a kind other than Client, ClusterClient
// and Ring: see New), but not by its breakers or failure policy: a failed
// exchange, an error matching floodgate.ErrUnavailable, leaves the Fleet
// on its previous reading. Options.Observer's OnStoreCall sees each of
// its round trips, carrying no decision (StoreCall.Decisions 0). It
// returns an error matching ErrInvalidOptions for an empty fleet name, one with a brace, or an
// expiry below MinFleetExpiry.
func (s *Store) FleetSource(fleet string, expiry time.Duration) (*FleetSource, error) {
	switch {
	case fleet == "":
		return nil, fmt.Errorf("%w: empty fleet name", ErrInvalidOptions)
	case len(fleet) > 256:
		return nil, fmt.Errorf("%w: fleet name of %d bytes (at most 256)", ErrInvalidOptions, len(fleet))
	case containsBrace(fleet):
		return nil, fmt.Errorf("%w: fleet name %q contains a brace", ErrInvalidOptions, fleet)
	case expiry < MinFleetExpiry:
		return nil, fmt.Errorf("%w: fleet expiry %v is below %v", ErrInvalidOptions, expiry, MinFleetExpiry)
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("redisstore: fleet id: %w", err)
	}
	return &FleetSource{s: s, key: s.FleetKey(fleet), id: hex.EncodeToString(b[:]),
		expiry: strconv.FormatInt(expiry.Milliseconds(), 10)}, nil
}

// FleetKey returns the Redis key of a fleet's hash: Prefix + "{" + fleet +
// "}:fleet".
func (s *Store) FleetKey(fleet string) string { return s.prefix + "{" + fleet + "}:fleet" }

func containsBrace(v string) bool {
	for i := range len(v) {
		if v[i] == '{' || v[i] == '}' {
			return true
		}
	}
	return false
}

var _ shed.FleetSource = (*FleetSource)(nil)

// Exchange records local as this process's load and returns the fleet's.
func (f *FleetSource) Exchange(ctx context.Context, local shed.Load) (shed.Load, error) {
	if f.s.timeout != NoTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.s.timeout)
		defer cancel()
	}
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	res, err := f.run(ctx, f.id, num(local.InFlight), num(local.Capacity), f.expiry).StringSlice()
	if err != nil {
		return shed.Load{}, fmt.Errorf("%w: fleet exchange: %w", floodgate.ErrUnavailable, err)
	}
	if len(res) != 2 {
		return shed.Load{}, fmt.Errorf("%w: fleet exchange reply %q", ErrReply, res)
	}
	var total shed.Load
	if total.InFlight, err = strconv.ParseFloat(res[0], 64); err != nil {
		return shed.Load{}, fmt.Errorf("%w: fleet exchange: %v", ErrReply, err)
	}
	if total.Capacity, err = strconv.ParseFloat(res[1], 64); err != nil {
		return shed.Load{}, fmt.Errorf("%w: fleet exchange: %v", ErrReply, err)
	}
	return total, nil
}

// run runs the fleet script (see Store.runOwn).
func (f *FleetSource) run(ctx context.Context, args ...any) *redis.Cmd {
	return f.s.runOwn(ctx, fleetScript, f.key, args...)
}

// runOwn runs script on key, a script of the Store's own that decides
// nothing (a fleet's exchange): EVALSHA, then EVAL if Redis does not have
// it, each round trip told to OnStoreCall (as the Store's own calls are, a
// NOSCRIPT answer included) with the node serving key. It goes through
// the Store's client, not its breakers, batches or failure policy.
func (s *Store) runOwn(ctx context.Context, script *redis.Script, key string, args ...any) *redis.Cmd {
	keys := []string{key}
	t := trip{}
	if s.onCall != nil {
		t = trip{s: s, ctx: ctx}
		if n, err := s.nodeFor(ctx, key); err == nil {
			t.node = n.addr
		}
	}
	cmd := t.timed(func() *redis.Cmd { return script.EvalSha(ctx, s.client, keys, args...) })
	if isNoScript(cmd.Err()) {
		cmd = t.timed(func() *redis.Cmd { return script.Eval(ctx, s.client, keys, args...) })
	}
	return cmd
}
