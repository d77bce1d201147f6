-- fixedwindow.lua: step.FixedWindow, the fixed window's reference
-- transition, as one atomic script.
--
-- KEYS[1]  the key's state: a string "start:count", the start of the window
--          the count belongs to (decimal nanoseconds since the Unix epoch)
--          and the units admitted in it; missing means "0:0".
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
-- replies the state it would write. redisstore re-runs step.FixedWindow on
-- the old state and now to build the Result, and checks that it agrees with
-- the reply. An admitted take sets delay (lib.lua).
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME.
-- Windows are aligned to the Unix epoch; window starts are computed
-- exactly from the instant in microseconds. The TTL is the time until the
-- window ends (or, for an emptied window reserved ahead, until it starts)
-- plus the margin.

local limit, w = quota, period
local wu = w / 1000

local old = redis.call('GET', key) or '0:0'
local sstr, cstr = string.match(old, '^(%-?%d+):(%d+)$')
if not sstr then
  error('floodgate: corrupt fixed window state')
end
local ss, sns = parse(sstr)
local so = sub(ss, sns, ts, tns) -- stored start - now

-- cur is the stored window, or the current one with no count when the
-- stored window has ended. Offsets are from now.
local wo = -wmod(ts, tns, wu) -- current window start - now, in (-w, 0]
local cs, cns, co, cc = ss, sns, so, tonumber(cstr)
if so < wo then
  cs, cns = add(ts, tns, wo)
  co, cc = wo, 0
end
-- A window that starts after now was reserved ahead: the current one is
-- closed.
local open = co <= 0

-- horizon is the time until a state starting at offset xo with count xc is
-- equivalent to a missing key.
local function horizon(xo, xc)
  if xc > 0 then
    return xo + w
  end
  return xo
end

local allowed, granted, new = 0, 0, old
if op == OP_TAKE then
  local xs, xns, xo, xc = cs, cns, co, cc + n
  if xc > limit then
    xs, xns = add(cs, cns, w)
    xo, xc = co + w, n
  end
  if math.max(xo, 0) <= maxd then
    allowed, granted = 1, n
    delay = math.max(xo, 0)
    new = fmt(xs, xns) .. ':' .. int(xc)
    keep(key, new, horizon(xo, xc), margin)
  end
elseif op == OP_TAKE_UP_TO then
  local m = 0
  if open then
    m = math.min(n, limit - cc)
  end
  if m > 0 then
    allowed, granted = 1, m
    new = fmt(cs, cns) .. ':' .. int(cc + m)
    keep(key, new, horizon(co, cc + m), margin)
  end
else -- OP_SETTLE
  -- Only in the window the units were counted in: a charge of up to
  -- 2 * limit units there (compared as in step.FixedWindow), or a
  -- give-back of the units it holds.
  local as, ans = parse(admitted)
  local ws, wns = wstart(as, ans, wu)
  if ws and same(ws, wns, cs, cns) then
    local xc
    if n > 0 then
      granted = math.min(n, math.max(limit - (cc - limit), 0))
      xc = cc + granted
    else
      granted = math.min(-n, cc)
      xc = cc - granted
    end
    if granted > 0 then
      allowed = 1
      new = fmt(cs, cns) .. ':' .. int(xc)
      keep(key, new, horizon(co, xc), margin)
    end
  end
end

return {ts, tns, old, new, allowed, granted}
