-- subwindow_fast.lua: the common case of subwindow.lua, run before
-- lib.lua's definitions (each costs a closure per call) and written out
-- without its helpers: a take without delay (ARGV[ARG_MAXDELAY] is 0, as
-- Allow sends) on Redis TIME, on a missing key or a state of this
-- configuration's sub-window length and S. Anything else falls through to
-- subwindow.lua. Without delay, a take is admitted exactly when the units
-- counted, once the state has moved to the current sub-window (every count
-- that leaves is dead then), plus n are at most the limit; it is counted in
-- the current sub-window, or the oldest kept one after a reservation. Both
-- files write the same state and TTL (a take that leaves the newest
-- sub-window as it was keeps the TTL the key has, which names the same
-- instant to the millisecond); redisstore checks every reply against
-- step.SubWindow. It also defines num and enc, the state's integer
-- codec, which subwindow.lua uses.
--
-- KEYS     none: fast(key, ARGV, t) takes the decision's key, its state as
--          subwindow.lua says
-- ARGV     the decision's (subwindow.lua says what they mean):
--          ARGV[ARG_N], ARGV[ARG_MAXDELAY], ARGV[ARG_MARGIN],
--          ARGV[ARG_QUOTA], ARGV[ARG_PERIOD] and ARGV[ARG_TAU]; the caller
--          runs fast only for a take (ARGV[ARG_OP] is OP_TAKE) on Redis
--          TIME (no ARGV[ARG_NOW])
-- Reply:   subwindow.lua's reply, or nil to fall through.
-- Time:    t, the TIME time.lua read (before MAX_UNIX s)

local Z7 = '\0\0\0\0\0\0\0'

-- num reads the 7-byte little-endian integer at byte offset p (from 0) of
-- str.
local function num(str, p)
  local b1, b2, b3, b4, b5, b6, b7 = string.byte(str, p + 1, p + 7)
  return b1 + 256 * (b2 + 256 * (b3 + 256 * (b4 + 256 * (b5 + 256 * (b6 + 256 * b7)))))
end

-- enc returns the 7 bytes of the integer v (0 <= v < 2^53).
local function enc(v)
  local b1 = v % 256
  v = (v - b1) / 256
  local b2 = v % 256
  v = (v - b2) / 256
  local b3 = v % 256
  v = (v - b3) / 256
  local b4 = v % 256
  v = (v - b4) / 256
  local b5 = v % 256
  v = (v - b5) / 256
  local b6 = v % 256
  return string.char(b1, b2, b3, b4, b5, b6, (v - b6) / 256)
end

local function fast(key, ARGV, t)
  if ARGV[ARG_MAXDELAY] + 0 ~= 0 then
    return nil
  end
  local n, limit, gu, s = ARGV[ARG_N] + 0, ARGV[ARG_QUOTA] + 0, ARGV[ARG_PERIOD] / 1000, ARGV[ARG_TAU] + 0
  local s1 = s + 1
  local tus = t[1] * 1000000 + t[2]
  local c = (tus - math.fmod(tus, gu)) / gu -- the current sub-window
  local old = redis.call('GET', key)
  local newest, total = c, 0
  if old then
    if #old ~= 7 * (s + 4) or num(old, 14) ~= gu then
      return nil
    end
    newest, total = num(old, 0), num(old, 7)
  end
  -- Moving to c: the k sub-windows after newest up to c take the slots
  -- of newest - s .. c - s - 1, whose counts leave, all dead at c (all S+1
  -- slots when k passes s). Their slots are a run (wrapping around the
  -- ring) from r0 to c's slot.
  local k, r0 = 0, 0
  if old and c > newest then
    k, r0 = math.min(c - newest, s1), math.fmod(newest + 1, s1)
    if k == s1 then
      total = 0
    else
      for j = newest + 1, c do
        total = total - num(old, 21 + 7 * math.fmod(j, s1))
      end
    end
    newest = c
  end
  -- p is the slot an admission is counted in: c's, or the oldest kept
  -- one's after a reservation (newest - s); x its new 7 bytes.
  local p = math.fmod(math.max(c, newest - s), s1)
  local allowed, granted, x = 0, 0, Z7
  if total + n <= limit then
    local v = n
    if old and k == 0 then
      v = v + num(old, 21 + 7 * p)
    end
    total, allowed, granted, x = total + n, 1, n, enc(v)
  end
  -- The new state, built in one concatenation from the old one's bytes.
  local new
  if not old or k == s1 then
    -- Every slot zero but p's (c's when k > 0).
    new = enc(newest) .. enc(total) .. enc(gu) .. string.rep(Z7, p) .. x .. string.rep(Z7, s - p)
  elseif k == 0 then
    if allowed == 0 then
      return {t[1] + 0, t[2] * 1000, old, string.sub(old, 1, 21), 0, 0}
    end
    -- The total and one count change in place: the newest sub-window
    -- stands, and with it the key's expiry (the TTL below is a fixed
    -- instant, the newest's count leaving, plus the margin). Two
    -- SETRANGEs cost Redis less than building and writing the whole
    -- state (measured with redis-benchmark: 9.3-10.3 us a call against
    -- 10.7-11.6 at S = 60 on one key).
    local et = enc(total)
    redis.call('SETRANGE', key, 7, et)
    redis.call('SETRANGE', key, 21 + 7 * p, x)
    return {t[1] + 0, t[2] * 1000, old, string.sub(old, 1, 7) .. et .. string.sub(old, 15, 21), 1, n}
  elseif r0 + k <= s1 then
    -- The run r0 .. r0 + k - 1 = p, zeros then x.
    new = enc(newest) .. enc(total) .. string.sub(old, 15, 21 + 7 * r0) .. string.rep(Z7, k - 1) .. x .. string.sub(old, 22 + 7 * (r0 + k))
  else
    -- The run wraps: r0 .. s, then 0 .. p = k2 - 1.
    local k2 = r0 + k - s1
    new = enc(newest) .. enc(total) .. enc(gu) .. string.rep(Z7, k2 - 1) .. x .. string.sub(old, 22 + 7 * k2, 21 + 7 * r0) .. string.rep(Z7, s1 - r0)
  end
  -- The TTL: until the newest sub-window's count has left, S+1
  -- sub-windows after its start, in ms rounded up, plus the margin.
  local left = (newest + s1) * gu - tus
  local r = math.fmod(left, 1000)
  left = (left - r) / 1000
  if r > 0 then
    left = left + 1
  end
  redis.call('SET', key, new, 'PX', string.format('%d', left + ARGV[ARG_MARGIN]))
  return {t[1] + 0, t[2] * 1000, old or '', string.sub(new, 1, 21), allowed, granted}
end
