-- The Peers of one region (package region's Peers contract), one call:
-- the lease, the demand added, the grants published, the grants read,
-- and for the leader the demand drained.
--
-- KEYS[1] the leader's lease: the leading member, with a TTL
-- KEYS[2] the region's demand: quota field → units asked since the drain
-- KEYS[3] the published grants: quota field → "index:granted,…"
-- ARGV[1] member; ARGV[2] lease in ms (0: give the lead up)
-- ARGV[3] TTL in ms of the demand and the grants
-- ARGV[4] publish (1 or 0)
-- ARGV[5] n, the quotas; then n pairs: field, units asked
-- then g, the grants; then g pairs: field, value
-- Reply: {1 if the sender leads else 0, {grant or false per quota},
--         {field, units, …} drained for the leader}

local member, lease, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local publish = ARGV[4] == '1'

local cur = redis.call('GET', KEYS[1])
if lease > 0 and (not cur or cur == member) then
  redis.call('SET', KEYS[1], member, 'PX', lease)
  cur = member
elseif lease == 0 and cur == member then
  redis.call('DEL', KEYS[1])
  cur = false
end
local leads = cur == member

local n = tonumber(ARGV[5])
local i = 6
local fields = {}
for k = 1, n do
  local f, asked = ARGV[i], ARGV[i + 1]
  i = i + 2
  fields[k] = f
  if asked ~= '0' then
    redis.call('HINCRBY', KEYS[2], f, asked)
  end
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end

local g = tonumber(ARGV[i])
i = i + 1
if leads and publish then
  redis.call('DEL', KEYS[3])
  for k = 1, g do
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
    i = i + 2
  end
  if g > 0 then
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
end

-- HMGET in chunks: unpack is bounded by Lua's stack.
local grants = {}
local k = 1
while k <= n do
  local last = math.min(k + 999, n)
  local got = redis.call('HMGET', KEYS[3], unpack(fields, k, last))
  for j = 1, #got do
    grants[k + j - 1] = got[j]
  end
  k = last + 1
end

local demand = {}
if leads then
  demand = redis.call('HGETALL', KEYS[2])
  redis.call('DEL', KEYS[2])
end
return {leads and 1 or 0, grants, demand}
