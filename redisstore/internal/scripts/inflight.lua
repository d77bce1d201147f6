-- inflight.lua: the holds of one key under one limiter name of package
-- inflight (a concurrent-request limiter), as one atomic script per
-- Acquire, Renew or Release. Source puts time.lua before it.
--
-- KEYS[1]  the holds of the key under the name, Prefix{key}:name:if
--          (redisstore's Store.InflightKey): a sorted set of holder ids,
--          each scored by the instant its hold expires, in whole
--          microseconds since the Unix epoch (exact in doubles until
--          MAX_UNIX). A hold whose score is at most the current instant is
--          dead: its holder stopped renewing it (its process died, or lost
--          Redis for a TTL).
-- ARGV[ARG_INF_OP]      the operation: INF_OP_ACQUIRE, INF_OP_RENEW or
--                       INF_OP_RELEASE
-- ARGV[ARG_INF_HOLDER]  the holder id: the store's random id and the
--                       hold's number
-- ARGV[ARG_INF_LIMIT]   the limit, at least 1 (acquire)
-- ARGV[ARG_INF_TTL]     how long the hold lives unless renewed, in whole
--                       microseconds, at least 1000 (acquire, renew)
-- ARGV[ARG_INF_MARGIN]  the TTL margin, in milliseconds (acquire, renew)
-- ARGV[ARG_INF_NOW]     the client's clock in whole microseconds since the
--                       Unix epoch, or '' for Redis TIME
--
-- Reply: {ok, in flight}: for an acquire, ok is 1 when the hold was added
-- and in flight counts the live holds after it, the new one included; for
-- a renewal, ok is 1 when the hold was live and now expires a TTL from
-- now; for a release, ok is 1 when the hold was there to remove. in
-- flight is the number of holds of the key after the step (for an acquire
-- and a renewal, the live ones).
--
-- Time: the client's clock when ARGV[ARG_INF_NOW] is set, else Redis TIME.
-- Writes: an acquire drops the dead holds before it counts; every write
-- leaves the key a TTL of at least the new expiry's, rounded up to a
-- millisecond, plus the margin, so the set outlives every live hold and
-- is gone once they all are dead. A denial writes nothing but the dead
-- holds' removal.

local key, op, holder = KEYS[1], ARGV[ARG_INF_OP], ARGV[ARG_INF_HOLDER]

if op == INF_OP_RELEASE then
  local removed = redis.call('ZREM', key, holder)
  return {removed, redis.call('ZCARD', key)}
end

local now
local arg = ARGV[ARG_INF_NOW] or ''
if arg ~= '' then
  now = tonumber(arg)
elseif serverTime then
  now = serverTime[1] * 1000000 + serverTime[2]
else
  return redis.error_reply('floodgate: the server clock reads MAX_UNIX seconds or later')
end
local ttl = tonumber(ARGV[ARG_INF_TTL])
local expiry = now + ttl

-- keep extends the key's TTL to cover expiry, and never shortens it: a
-- hold of a longer TTL (another limiter's of the same name) may be live.
local function keep()
  local want = math.ceil(ttl / 1000) + tonumber(ARGV[ARG_INF_MARGIN])
  if redis.call('PTTL', key) < want then
    redis.call('PEXPIRE', key, want)
  end
end

if op == INF_OP_RENEW then
  local score = redis.call('ZSCORE', key, holder)
  if not score or tonumber(score) <= now then
    -- Released, or dead: its slot may be another's by now, and must not
    -- come back.
    if score then
      redis.call('ZREM', key, holder)
    end
    return {0, redis.call('ZCARD', key)}
  end
  redis.call('ZADD', key, 'XX', expiry, holder)
  keep()
  return {1, redis.call('ZCARD', key)}
end

if op ~= INF_OP_ACQUIRE then
  return redis.error_reply('floodgate: unknown in-flight operation ' .. tostring(op))
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local n = redis.call('ZCARD', key)
if n >= tonumber(ARGV[ARG_INF_LIMIT]) then
  return {0, n}
end
if redis.call('ZADD', key, 'NX', expiry, holder) == 0 then
  return redis.error_reply('floodgate: holder id ' .. holder .. ' already holds a slot')
end
keep()
return {1, n + 1}
