-- leakybucket.lua: floodgate.LeakyBucket.Step (a FIFO shaper) as one atomic
-- script.
--
-- KEYS[1]  the key's state: a string, the tail (the next departure slot),
--          in decimal nanoseconds since the Unix epoch; missing means 0.
-- ARGV[1]  now in decimal ns (the client's clock), or "" for Redis TIME
-- ARGV[2]  op: 0 take, 1 take up to n, 2 refund (gives nothing back)
-- ARGV[3]  n, the units
-- ARGV[4]  the maximum delay of a take, in ns (at most 2^52)
-- ARGV[5]  the refund instant (unused)
-- ARGV[6]  the TTL margin, in ms
-- ARGV[7]  the capacity
-- ARGV[8]  the emission interval Per/Rate, in ns (rounded up)
-- ARGV[9]  tau = capacity * interval, in ns (at most 2^52)
--
-- Reply: {now, old tail, new tail, allowed (0 or 1), granted}, instants as
-- decimal strings. The new tail equals the old one when nothing was
-- written. redisstore re-runs LeakyBucket.Step on the old tail and now to
-- build the Result, and checks that it agrees with the reply.
--
-- Time: the client's clock when ARGV[1] is set, else Redis TIME. The TTL is
-- the time until the queue drains (the tail) plus the margin.

local key = KEYS[1]
local ts, tns = clock(ARGV[1])
local op, n, maxd, margin = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6])
local capacity, interval, tau = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

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

return {fmt(ts, tns), old, new, allowed, granted}
