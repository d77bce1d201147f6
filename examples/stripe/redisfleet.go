package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/adaptive/shed"
)

// redisFleet is the shed.FleetSource of package shed's doc: one hash per
// fleet holding each process's load and when it was recorded, and one
// script call per exchange (every 10ms per process) that records this
// process's load, drops the processes not heard from within the expiry,
// and sums the rest, on Redis's clock. It reads the whole hash, which
// suits fleets of tens of processes (see the shed package doc for a
// larger one).
type redisFleet struct {
	rdb    redis.UniversalClient
	key    string // the fleet's hash
	id     string // this process's field
	expiry string // in milliseconds: a process not heard from for this long drops out
}

func newRedisFleet(rdb redis.UniversalClient, key, id string, expiry time.Duration) (*redisFleet, error) {
	if expiry < time.Millisecond {
		return nil, fmt.Errorf("fleet expiry %v: at least 1ms", expiry)
	}
	return &redisFleet{rdb: rdb, key: key, id: id, expiry: strconv.FormatInt(expiry.Milliseconds(), 10)}, nil
}

var exchangeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. now)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local inflight, capacity = 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f, c, at = string.match(all[i + 1], '(%S+) (%S+) (%S+)')
  if now - tonumber(at) > tonumber(ARGV[4]) then
    redis.call('HDEL', KEYS[1], all[i])
  else
    inflight, capacity = inflight + tonumber(f), capacity + tonumber(c)
  end
end
return {tostring(inflight), tostring(capacity)}
`)

// Exchange records local as this process's load and returns the fleet's.
func (f *redisFleet) Exchange(ctx context.Context, local shed.Load) (shed.Load, error) {
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	res, err := exchangeScript.Run(ctx, f.rdb, []string{f.key}, f.id, num(local.InFlight), num(local.Capacity), f.expiry).StringSlice()
	if err != nil {
		return shed.Load{}, err
	}
	if len(res) != 2 {
		return shed.Load{}, fmt.Errorf("fleet exchange: reply %q", res)
	}
	var fleet shed.Load
	if fleet.InFlight, err = strconv.ParseFloat(res[0], 64); err != nil {
		return shed.Load{}, fmt.Errorf("fleet exchange: %w", err)
	}
	if fleet.Capacity, err = strconv.ParseFloat(res[1], 64); err != nil {
		return shed.Load{}, fmt.Errorf("fleet exchange: %w", err)
	}
	return fleet, nil
}
