-- subwindow_fast.lua: the common case of subwindow.lua, run before
-- lib.lua's definitions (each costs a closure per call) and written out
-- without its helpers: a take without delay (ARGV[ARG_MAXDELAY] is 0, as
-- Allow sends) on Redis TIME, on a missing key or a state of this
-- configuration's sub-window length and S. Anything else falls through to
-- subwindow.lua. Without delay, a take is admitted exactly when the units
-- counted, once the state has moved to the current sub-window (every count
-- that leaves is dead then), plus n are at most the limit; it is counted in
-- the current sub-window, or the oldest kept one after a reservation. Both
-- files write the same state and TTL; redisstore checks every reply
-- against step.SubWindow. It also defines num and enc, the state's integer
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
  local tus = t[1] * 1000000 + t[2]
  local c = (tus - math.fmod(tus, gu)) / gu -- the current sub-window
  local old = redis.call('GET', key)
  -- ring is the string holding the counts from byte offset o: the old
  -- state (o = 21) until the counts change otherwise than by one count.
  local newest, total, ring, o, changed
  if old then
    if #old ~= 7 * (s + 4) or num(old, 14) ~= gu then
      return nil
    end
    newest, total, ring, o, changed = num(old, 0), num(old, 7), old, 21, false
  else
    newest, total, ring, o, changed = c, 0, string.rep(Z7, s + 1), 0, true
  end
  if c > newest then
    -- Move to c: the counts of newest - s .. c - s - 1 leave, all dead.
    local first, last = newest - s, math.min(newest, c - s - 1)
    if last - first >= s then
      ring, o, total = string.rep(Z7, s + 1), 0, 0
    elseif last >= first then
      for j = first, last do
        total = total - num(ring, o + 7 * math.fmod(j, s + 1))
      end
      local i0, k = math.fmod(first, s + 1), last - first + 1
      if i0 + k <= s + 1 then
        ring = string.sub(ring, o + 1, o + 7 * i0) .. string.rep(Z7, k) .. string.sub(ring, o + 7 * (i0 + k) + 1)
      else
        local k2 = i0 + k - (s + 1)
        ring = string.rep(Z7, k2) .. string.sub(ring, o + 7 * k2 + 1, o + 7 * i0) .. string.rep(Z7, s + 1 - i0)
      end
      o = 0
    end
    newest, changed = c, true
  end
  local allowed, granted, p, v = 0, 0, 0, 0
  if total + n <= limit then
    -- The count to change, written as the new state is built.
    p = 7 * math.fmod(math.max(c, newest - s), s + 1)
    v = num(ring, o + p) + n
    total, changed, allowed, granted = total + n, true, 1, n
  end
  local new = old or ''
  if changed then
    if o == 21 then
      -- The old state with its total and one count changed: its newest
      -- and sub-window bytes stand.
      new = string.sub(old, 1, 7) .. enc(total) .. string.sub(old, 15, 21 + p) .. enc(v) .. string.sub(old, 29 + p)
    elseif allowed == 1 then
      new = enc(newest) .. enc(total) .. enc(gu) .. string.sub(ring, o + 1, o + p) .. enc(v) .. string.sub(ring, o + p + 8)
    else
      new = enc(newest) .. enc(total) .. enc(gu) .. string.sub(ring, o + 1)
    end
    -- The TTL: until the newest sub-window's count has left, S+1
    -- sub-windows after its start, in ms rounded up, plus the margin.
    local left = (newest + s + 1) * gu - tus
    local r = math.fmod(left, 1000)
    left = (left - r) / 1000
    if r > 0 then
      left = left + 1
    end
    redis.call('SET', key, new, 'PX', string.format('%d', left + ARGV[ARG_MARGIN]))
  end
  return {t[1] + 0, t[2] * 1000, old or '', string.sub(new, 1, 21), allowed, granted}
end
