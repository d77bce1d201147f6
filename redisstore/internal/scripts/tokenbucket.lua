-- tokenbucket.lua: step.TokenBucket, the token bucket's reference transition
-- (GCRA), as one atomic script.
--
-- KEYS[1]  the key's state: a string, the theoretical arrival time (TAT),
--          in decimal nanoseconds since the Unix epoch; missing means 0.
-- ARGV     as args.lua reads them, where
--   ARGV[ARG_QUOTA]   quota is the burst
--   ARGV[ARG_PERIOD]  period is the emission interval Per/Rate, in ns
--                     (rounded up)
--   ARGV[ARG_TAU]     tau = burst * period, in ns (at most
--                     floodgate.MaxWindow)
--   ARGV[ARG_AT]      is unused
--
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), old TAT, new TAT,
-- allowed (0 or 1), granted}, instants as decimal strings. The new TAT
-- equals the old one when the step changes nothing; a dry step (a check)
-- replies the TAT it would write. redisstore re-runs step.TokenBucket on
-- the old TAT and now to build the Result, and checks that it agrees with
-- allowed, granted and the new TAT. An admitted take sets delay (lib.lua).
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME. The
-- TTL is the time until the TAT (when the bucket is full again) plus the
-- margin.

local interval = period

local old = redis.call('GET', key) or '0'
local as, ans = parse(old)
local o = sub(as, ans, ts, tns) -- tat - now

-- base = max(tat, now), as a pair and as an offset from now.
local bs, bns, b = ts, tns, 0
if o > 0 then
  bs, bns, b = as, ans, o
end

local allowed, granted, new = 0, 0, old
if op == OP_TAKE then
  local d = n * interval
  -- The wait (base + d - tau - now), grouped so that every partial sum of
  -- an admissible request stays within 2^53.
  if (b - tau) + d <= maxd then
    allowed, granted = 1, n
    delay = math.max((b - tau) + d, 0)
    new = fmt(add(bs, bns, d))
    keep(key, new, b + d, margin)
  end
elseif op == OP_TAKE_UP_TO then
  -- Whole tokens in the bucket: floor((now + tau - base) / interval).
  local m = math.min(n, math.max(fdiv(tau - b, interval), 0))
  if m > 0 then
    local d = m * interval
    allowed, granted = 1, m
    new = fmt(add(bs, bns, d))
    keep(key, new, b + d, margin)
  end
elseif n > 0 then -- OP_SETTLE, a charge
  -- Into debt of at most one more bucket: the schedule ends at most
  -- 2 * tau after now, floor((now + 2 * tau - base) / interval) units.
  local m = math.min(n, math.max(fdiv(2 * tau - b, interval), 0))
  if m > 0 then
    local d = m * interval
    allowed, granted = 1, m
    new = fmt(add(bs, bns, d))
    keep(key, new, b + d, margin)
  end
else -- OP_SETTLE, a give-back
  -- Only units whose tokens have not refilled yet come back.
  local back = math.min(-n, math.max(ceildiv(o, interval), 0))
  if back > 0 then
    allowed, granted = 1, back
    local d = o - back * interval
    local xs, xns = ts, tns
    if d > 0 then
      xs, xns = add(as, ans, -back * interval)
    else
      d = 0
    end
    new = fmt(xs, xns)
    keep(key, new, d, margin)
  end
end

return {ts, tns, old, new, allowed, granted}
