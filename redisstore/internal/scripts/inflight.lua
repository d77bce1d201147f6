-- inflight.lua: the holds of one key under one limiter name of package
-- inflight (a concurrent-request limiter), as one atomic script per
-- Acquire, Renew, Release or Cancel. Source puts time.lua before it.
--
-- KEYS[1]  the holds of the key under the name, Prefix{key}:name:if
--          (redisstore's Store.InflightKey): a sorted set of holder ids,
--          each scored by the instant its hold expires, in whole
--          microseconds since the Unix epoch (exact in doubles until
--          MAX_UNIX). A hold whose score is at most the current instant is
--          dead: its holder stopped renewing it (its process died, or lost
--          Redis for a TTL).
-- KEYS[2]  (acquire and cancel) the cancelled holder ids of the key under
--          the name, KEYS[1] .. ':gone': a sorted set scored by the
--          instant each mark may be forgotten. An acquire whose holder id
--          is marked adds nothing: its caller was told it failed, and a
--          cancel has already run for it.
-- ARGV[ARG_INF_OP]      the operation: INF_OP_ACQUIRE, INF_OP_RENEW,
--                       INF_OP_RELEASE or INF_OP_CANCEL
-- ARGV[ARG_INF_HOLDER]  the holder id: the store's random id and the
--                       hold's number
-- ARGV[ARG_INF_LIMIT]   the limit, at least 1 (acquire)
-- ARGV[ARG_INF_TTL]     how long the hold lives unless renewed, in whole
--                       microseconds, at least 1000 (acquire, renew; for
--                       a cancel, how long its mark lives)
-- ARGV[ARG_INF_MARGIN]  the TTL margin, in milliseconds (acquire, renew,
--                       cancel)
-- ARGV[ARG_INF_NOW]     the client's clock in whole microseconds since the
--                       Unix epoch, or '' for Redis TIME
-- ARGV[ARG_INF_NOW + 1 ...]  (cancel) further holder ids to cancel
--
-- Reply: {ok, in flight}: for an acquire, ok is 1 when the hold was added
-- and in flight counts the live holds after it, the new one included; for
-- a renewal, ok is 1 when the hold was live and now expires a TTL from
-- now; for a release, ok is 1 when the hold was there to remove; for a
-- cancel (the holds of acquires that failed and may run later), ok is 1
-- when one of the holds was there to remove; each holder id whose hold
-- was not there is marked in KEYS[2] for a TTL, so that its acquire, if
-- it runs within it, adds nothing. in
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

if op == INF_OP_CANCEL then
  -- The holder, then any further ones after ARGV[ARG_INF_NOW].
  local gone, removed, marked = KEYS[2], 0, false
  redis.call('ZREMRANGEBYSCORE', gone, '-inf', now)
  for j = 0, #ARGV - ARG_INF_NOW do
    local h = holder
    if j > 0 then
      h = ARGV[ARG_INF_NOW + j]
    end
    if redis.call('ZREM', key, h) == 1 then
      removed = 1
    else
      redis.call('ZADD', gone, expiry, h)
      marked = true
    end
  end
  if marked then
    local want = math.ceil(ttl / 1000) + tonumber(ARGV[ARG_INF_MARGIN])
    if redis.call('PTTL', gone) < want then
      redis.call('PEXPIRE', gone, want)
    end
  end
  return {removed, redis.call('ZCARD', key)}
end

if op ~= INF_OP_ACQUIRE then
  return redis.error_reply('floodgate: unknown in-flight operation ' .. tostring(op))
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local n = redis.call('ZCARD', key)
if KEYS[2] and redis.call('ZSCORE', KEYS[2], holder) then
  -- Cancelled: this acquire's caller was told it failed.
  return {0, n}
end
if n >= tonumber(ARGV[ARG_INF_LIMIT]) then
  return {0, n}
end
if redis.call('ZADD', key, 'NX', expiry, holder) == 0 then
  return redis.error_reply('floodgate: holder id ' .. holder .. ' already holds a slot')
end
keep()
return {1, n + 1}
