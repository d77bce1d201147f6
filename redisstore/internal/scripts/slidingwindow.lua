-- slidingwindow.lua: step.SlidingWindow, the sliding window counter's
-- reference transition (the weighted two-counter estimate), as one atomic
-- script.
--
-- KEYS[1]  the key's state: a string "start:prev:curr", the start of the
--          current fixed window (decimal nanoseconds since the Unix epoch)
--          and the units admitted in the window before it and in it;
--          missing means "0:0:0".
-- ARGV     as args.lua reads them, where
--   ARGV[ARG_QUOTA]   quota is the limit
--   ARGV[ARG_PERIOD]  period is the window, in ns: a whole number of
--                     microseconds, at most floodgate.MaxWindow
--   ARGV[ARG_TAU]     is 0 (unused)
--   ARGV[ARG_AT]      admitted, for a settlement, is the instant the
--                     units were admitted for
--
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), old state, new
-- state, allowed (0 or 1), granted}, the states as stored. The new state
-- equals the old one when the step changes nothing; a dry step (a check)
-- replies the state it would write. redisstore re-runs step.SlidingWindow
-- on the old state and now to build the Result, and checks that it agrees
-- with the reply. An admitted take sets delay (lib.lua).
--
-- The estimate is a double computed in the order of operations of
-- package step's swAvail, (L - curr) - prev*(W - e)/W, and the earliest
-- admission instant is the least at which the request fits, the one
-- swEarliest finds (see earliest below), so both make the same decision
-- bit for bit.
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME.
-- Windows are aligned to the Unix epoch. The TTL is the time until the
-- state rolls to empty (two windows after the start with a current count,
-- one with only a previous count) plus the margin.

local limit, w = quota, period
local wu = w / 1000

local old = redis.call('GET', key) or '0:0:0'
local sstr, pstr, cstr = string.match(old, '^(%-?%d+):(%d+):(%d+)$')
if not sstr then
  error('floodgate: corrupt sliding window state')
end
local ss, sns = parse(sstr)
local so = sub(ss, sns, ts, tns) -- stored start - now

-- cur is the stored state rolled forward to the current window (offsets
-- from now): kept when it is current or ahead, its curr becomes prev when
-- it is the window just before, and it empties when it is older.
local wo = -wmod(ts, tns, wu) -- current window start - now, in (-w, 0]
local cs, cns, co, cp, cc = ss, sns, so, tonumber(pstr), tonumber(cstr)
if so < wo then
  cs, cns = add(ts, tns, wo)
  if so == wo - w then
    cp, cc = cc, 0
  else
    cp, cc = 0, 0
  end
  co = wo
end
-- The offset of now into cur's window, or 0 for a window reserved ahead.
local from = math.max(-co, 0)

-- avail returns limit - est at offset e into a window with counts p, c.
local function avail(p, c, e)
  return (limit - c) - p * (w - e) / w
end

-- earliest returns the smallest offset e in [f, w] into a window with
-- counts p, c at which k units fit, or -1 when they do not fit in it.
--
-- It returns what step's swEarliest returns, the least e in [f, w] at which
-- k <= avail(e): avail never decreases as e grows (the float operations are
-- monotone), so that e is one instant, whichever way it is found. swEarliest
-- bisects [f, w] for it. This function first tries the offset solved from
-- the linear decay of the previous count and its neighbour, one of which it
-- is unless the float estimate is flat around the solved offset, and then
-- bisects only the side of the solved offset where it lies: the estimate can
-- be flat over very long runs of e (a large limit, a small previous count, a
-- long window), where stepping one nanosecond at a time from the solved
-- offset would keep Redis busy for hours.
local function earliest(p, c, f, k)
  local room = limit - c - k
  if room < 0 then
    return -1
  end
  if k <= avail(p, c, f) then
    return f
  end
  local e = math.ceil(w * (p - room) / p)
  e = math.min(math.max(e, f), w)
  local lo, hi -- the answer is in [lo, hi], and k fits at hi
  if k <= avail(p, c, e) then
    if e == f or k > avail(p, c, e - 1) then
      return e
    end
    lo, hi = f + 1, e - 1
  else
    if k <= avail(p, c, e + 1) then
      return e + 1
    end
    lo, hi = e + 2, w
  end
  while lo < hi do
    local mid = lo + math.floor((hi - lo) / 2)
    if k <= avail(p, c, mid) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- admit returns the offset into cur's window (0 to 2w) of the earliest
-- instant, at from or later, at which k units fit: in cur's window, or
-- else in the next one, whose previous count is cur's current count.
local function admit(k)
  local e = earliest(cp, cc, from, k)
  if e >= 0 then
    return e
  end
  return w + earliest(cc, 0, 0, k)
end

-- remaining is what step.SlidingWindow reports for cur.
local function remaining()
  if co > 0 then
    return 0
  end
  return math.max(math.floor(avail(cp, cc, -co)), 0)
end

-- horizon is the time until a state starting at offset xo with counts
-- p, c rolls to an empty one.
local function horizon(xo, p, c)
  if c > 0 then
    return xo + 2 * w
  elseif p > 0 then
    return xo + w
  end
  return xo
end

local function state(s, ns, p, c)
  return fmt(s, ns) .. ':' .. int(p) .. ':' .. int(c)
end

local allowed, granted, new = 0, 0, old
if op == OP_TAKE then
  local e = admit(n)
  if math.max(co + e, 0) <= maxd then
    allowed, granted = 1, n
    delay = math.max(co + e, 0)
    -- The admission's window is cur's, the next or the one after.
    local xs, xns, xo, xp, xc = cs, cns, co, cp, cc + n
    if e >= 2 * w then
      xs, xns = add(cs, cns, 2 * w)
      xo, xp, xc = co + 2 * w, 0, n
    elseif e >= w then
      xs, xns = add(cs, cns, w)
      xo, xp, xc = co + w, cc, n
    end
    new = state(xs, xns, xp, xc)
    keep(key, new, horizon(xo, xp, xc), margin)
  end
elseif op == OP_TAKE_UP_TO then
  local m = math.min(n, remaining())
  if m > 0 then
    allowed, granted = 1, m
    new = state(cs, cns, cp, cc + m)
    keep(key, new, horizon(co, cp, cc + m), margin)
  end
else -- OP_SETTLE
  -- In the counter the units were counted in: a charge of up to 2 * limit
  -- units there (compared as in step.SlidingWindow), or a give-back of the
  -- units it holds.
  local function settle(x)
    if n > 0 then
      granted = math.min(n, math.max(limit - (x - limit), 0))
      return x + granted
    end
    granted = math.min(-n, x)
    return x - granted
  end
  local as, ans = parse(admitted)
  local ws, wns = wstart(as, ans, wu)
  local xp, xc = cp, cc
  if ws and same(ws, wns, cs, cns) then
    xc = settle(cc)
  elseif ws and same(ws, wns, add(cs, cns, -w)) then
    xp = settle(cp)
  end
  if granted > 0 then
    allowed = 1
    new = state(cs, cns, xp, xc)
    keep(key, new, horizon(co, xp, xc), margin)
  end
end

return {ts, tns, old, new, allowed, granted}
