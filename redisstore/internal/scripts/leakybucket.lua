-- leakybucket.lua: step.LeakyBucket, the leaky bucket's reference
-- transition (a FIFO shaper), as one atomic script.
--
-- KEYS[1]  the key's state: a string, the tail (the next departure slot),
--          in decimal nanoseconds since the Unix epoch; missing means 0.
-- ARGV     as args.lua reads them, where
--   ARGV[ARG_QUOTA]   quota is the capacity
--   ARGV[ARG_PERIOD]  period is the emission interval Per/Rate, in ns
--                     (rounded up)
--   ARGV[ARG_TAU]     tau = capacity * period, in ns (at most
--                     floodgate.MaxWindow)
--   ARGV[ARG_AT]      is unused
--
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), old tail, new
-- tail, allowed (0 or 1), granted}, instants as decimal strings. The new
-- tail equals the old one when the step changes nothing; a dry step (a
-- check) replies the tail it would write. redisstore re-runs
-- step.LeakyBucket on the old tail and now to build the Result, and checks
-- that it agrees with the reply. An admitted take sets delay (lib.lua).
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME. The
-- TTL is the time until the queue drains (the tail) plus the margin.

local capacity, interval = quota, period

local old = redis.call('GET', key) or '0'
local as, ans = parse(old)
local o = sub(as, ans, ts, tns) -- tail - now

-- This request's departure, base = max(tail, now), as a pair and as an
-- offset from now.
local bs, bns, b = ts, tns, 0
if o > 0 then
  bs, bns, b = as, ans, o
end

local allowed, granted, new = 0, 0, old
if op == OP_TAKE then
  local d = n * interval
  -- Admitted when the queue ahead plus this request fits in the bucket and
  -- the departure is within the maximum delay.
  if b + d <= tau and b <= maxd then
    allowed, granted = 1, n
    delay = b
    new = fmt(add(bs, bns, d))
    keep(key, new, b + d, margin)
  end
elseif op == OP_TAKE_UP_TO then
  -- Only an empty queue lets units depart at once.
  if b <= 0 then
    local d = math.min(n, capacity) * interval
    allowed, granted = 1, math.min(n, capacity)
    new = fmt(add(ts, tns, d))
    keep(key, new, d, margin)
  end
elseif n > 0 then -- OP_SETTLE, a charge
  -- Queued behind the tail, up to 2 * capacity units of queue in all:
  -- floor((now + 2 * tau - base) / interval) units.
  local m = math.min(n, math.max(fdiv(2 * tau - b, interval), 0))
  if m > 0 then
    local d = m * interval
    allowed, granted = 1, m
    new = fmt(add(bs, bns, d))
    keep(key, new, b + d, margin)
  end
end
-- OP_SETTLE, a give-back: departure slots are promised to the requests
-- behind; nothing comes back.

return {ts, tns, old, new, allowed, granted}
