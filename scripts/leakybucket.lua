-- leakybucket.lua: floodgate.LeakyBucket.Step (a FIFO shaper) as one atomic
-- script.
--
-- KEYS[1]  the key's state: a string, the tail (the next departure slot),
--          in decimal nanoseconds since the Unix epoch; missing means 0.
-- ARGV[1]  op: 0 take, 1 take up to n, 2 refund
-- ARGV[2]  n, the units
-- ARGV[3]  the maximum delay of a take, in ns (at most 2^52)
-- ARGV[4]  the TTL margin, in ms
-- ARGV[5]  the capacity
-- ARGV[6]  the emission interval Per/Rate, in ns (rounded up)
-- ARGV[7]  tau = capacity * interval, in ns (at most 2^52)
-- ARGV[8]  now in decimal ns (the client's clock); absent or "" for Redis
--          TIME
-- ARGV[9]  the refund instant (unused)
--
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), old tail, new
-- tail, allowed (0 or 1), granted}, instants as decimal strings. The new
-- tail equals the old one when nothing was written. redisstore re-runs
-- LeakyBucket.Step on the old tail and now to build the Result, and checks
-- that it agrees with the reply.
--
-- Time: the client's clock when ARGV[8] is set, else Redis TIME. The TTL is
-- the time until the queue drains (the tail) plus the margin.

local key = KEYS[1]
local ts, tns = clock(ARGV[8])
local op, n, maxd, margin = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0
local capacity, interval, tau = ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0

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
if op == 0 then
  local d = n * interval
  -- Admitted when the queue ahead plus this request fits in the bucket and
  -- the departure is within the maximum delay.
  if b + d <= tau and b <= maxd then
    allowed, granted = 1, n
    new = fmt(add(bs, bns, d))
    keep(key, new, b + d, margin)
  end
elseif op == 1 then
  -- Only an empty queue lets units depart at once.
  if b <= 0 then
    local d = math.min(n, capacity) * interval
    allowed, granted = 1, math.min(n, capacity)
    new = fmt(add(ts, tns, d))
    keep(key, new, d, margin)
  end
end
-- op 2: departure slots are promised to the requests behind; nothing comes
-- back.

return {ts, tns, old, new, allowed, granted}
