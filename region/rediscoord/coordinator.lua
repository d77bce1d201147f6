-- coordinator.lua: one Exchange of package region's protocol, atomically.
-- The twin of region.MemCoordinator.apply; rediscoord's differential test
-- holds them together.
--
-- KEYS[1]  the key prefix, ending in the hash tag that puts every key of
--          the coordinator in one Cluster slot. The script writes keys
--          that start with it (computed, not declared: they share its slot):
--            KEYS[1] .. quota .. ":w" .. window   hash: g<i>, d<i> (granted,
--                                                  debited by region i),
--                                                  t:<transfer id>
--            KEYS[1] .. quota .. ":r"             hash: rate<i>, uw<i>,
--                                                  used<i>, at<i>
-- ARGV[1]  the message, JSON (built by rediscoord's encode):
--            r   the sender's region, 1-based     n   the number of regions
--            at  the sender's clock, Unix ms; ats the same as a string
--            q   the quotas: {id, lim, w (the sender's current window),
--                wm (window, ms), ix (true: w is the sender's index of a
--                window of varying length), f (floors, units, per region),
--                rep ([rate as a string, window, used], absent for none),
--                deb ([[transfer id, window, units]]), rai ([[window, to]])}
-- Reply    per quota: {granted(w), debited(w), granted(w+1), debited(w+1),
--          rates, report windows, used, report times (Unix ms; "" for a
--          region that never reported), acked transfer ids}; the per-region
--          lists are in region order, the reports as strings.
-- Time     none is read: windows and report times are the sender's.
-- TTL      a window's hash lives until two windows after its end; the
--          reports three windows after the last.
local p = KEYS[1]
local m = cjson.decode(ARGV[1])
local r, n = m.r, m.n
local out = {}
for qi, q in ipairs(m.q) do
  local function wkey(i) return p .. q.id .. ':w' .. string.format('%d', i) end
  -- A window's state lives until two windows after it ends; an indexed
  -- (calendar) window's index is not its start divided by wm, so its
  -- state lives three of its longest windows after the last write.
  local function ttl(i)
    if q.ix then return 3 * q.wm end
    return math.max((i + 3) * q.wm - m.at, 1000)
  end
  local function granted(k, s)
    return math.max(tonumber(redis.call('HGET', k, 'g' .. s) or '0'), q.f[s])
  end
  local function debited(k, s) return tonumber(redis.call('HGET', k, 'd' .. s) or '0') end
  local rkey = p .. q.id .. ':r'
  if q.rep then
    redis.call('HSET', rkey, 'rate' .. r, q.rep[1], 'uw' .. r, q.rep[2], 'used' .. r, q.rep[3], 'at' .. r, m.ats)
    redis.call('PEXPIRE', rkey, 3 * q.wm)
  end
  local acked = {}
  for _, d in ipairs(q.deb or {}) do
    acked[#acked + 1] = d[1]
    local win = d[2]
    if win >= q.w - 1 and win <= q.w + 1 then
      local k = wkey(win)
      if redis.call('HSETNX', k, 't:' .. d[1], 1) == 1 then
        -- Recording fewer units than the region took out only strands
        -- them; recording more than it holds would exceed the quota.
        local dd = debited(k, r)
        redis.call('HSET', k, 'd' .. r, dd + math.min(d[3], math.max(granted(k, r) - dd, 0)))
      end
      redis.call('PEXPIRE', k, ttl(win))
    end
  end
  for _, x in ipairs(q.rai or {}) do
    local win, to = x[1], x[2]
    if win == q.w or win == q.w + 1 then
      local k = wkey(win)
      local held = 0
      for s = 1, n do held = held + granted(k, s) - debited(k, s) end
      local g = granted(k, r)
      if to > g then
        redis.call('HSET', k, 'g' .. r, g + math.min(to - g, math.max(q.lim - held, 0)))
        redis.call('PEXPIRE', k, ttl(win))
      end
    end
  end
  local res = {}
  for _, i in ipairs({q.w, q.w + 1}) do
    local k, g, d = wkey(i), {}, {}
    for s = 1, n do
      g[s] = granted(k, s)
      d[s] = debited(k, s)
    end
    res[#res + 1] = g
    res[#res + 1] = d
  end
  local rates, uws, used, ats = {}, {}, {}, {}
  for s = 1, n do
    local v = redis.call('HMGET', rkey, 'rate' .. s, 'uw' .. s, 'used' .. s, 'at' .. s)
    rates[s], uws[s], used[s], ats[s] = v[1] or '', v[2] or '', v[3] or '', v[4] or ''
  end
  res[#res + 1] = rates
  res[#res + 1] = uws
  res[#res + 1] = used
  res[#res + 1] = ats
  res[#res + 1] = acked
  out[qi] = res
end
return out
