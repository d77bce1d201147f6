-- calendarwindow.lua: step.CalendarWindow, the calendar window's reference
-- transition (a fixed window with civil boundaries), as one atomic script.
--
-- KEYS[1]  the key's state, as fixedwindow.lua's: "start:count", the start
--          of the window the count belongs to (decimal nanoseconds since
--          the Unix epoch) and the units admitted in it; missing means
--          "0:0". A calendar window is of the fixed window's kind and
--          shares its key.
-- ARGV     as args.lua reads them, where
--   ARGV[ARG_QUOTA]   quota is the limit
--   ARGV[ARG_PERIOD]  period is at least six window boundaries, in whole
--                     seconds since the Unix epoch, increasing, separated
--                     by spaces: the client computed them around its own
--                     clock (floodgate.CalendarWindow.Window), from the
--                     start of the window before the one holding its
--                     clock to the start of the third window after the
--                     one holding its clock plus the take's maximum delay
--   ARGV[ARG_TAU]     is 0 (unused)
--   ARGV[ARG_AT]      admitted, for a settlement, is the instant the
--                     units were admitted for
--
-- Reply: fixedwindow.lua's, {now's seconds, now's nanoseconds, old state,
-- new state, allowed (0 or 1), granted}. redisstore re-runs
-- step.CalendarWindow on the old state and now, with the boundaries of
-- Go's time package, and checks that it agrees with the reply.
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME; the
-- window is the one of the boundaries that holds it, so a client clock
-- that is off by less than a window still decides on the server's. An
-- instant without a window and two more after it in the list is an
-- error. Offsets of a year are inexact as doubles, but they are only
-- compared with the maximum delay (at most floodgate.MaxDelay), which they
-- exceed either way; TTLs are computed in milliseconds from the
-- boundaries' seconds, exactly.

local limit = quota
local b = {}
for v in string.gmatch(period, '%S+') do
  b[#b + 1] = tonumber(v)
end
if #b < 6 then
  error('floodgate: calendar window boundaries: ' .. period)
end

-- b[i] <= now < b[i + 1], with two boundaries after b[i + 1] (a take may
-- reserve into the window after the next): boundaries are whole seconds,
-- so comparing the seconds decides.
local i = nil
for j = 1, #b - 3 do
  if b[j] <= ts and ts < b[j + 1] then
    i = j
    break
  end
end
if not i then
  error('floodgate: the clock (' .. ts .. ' s) is outside the calendar windows the client sent (' .. period .. ')')
end

local old = redis.call('GET', key) or '0:0'
local sstr, cstr = string.match(old, '^(%-?%d+):(%d+)$')
if not sstr then
  error('floodgate: corrupt fixed window state')
end
local cs, cns = parse(sstr)
local cc = tonumber(cstr)
-- A state of an ended window is a new one's.
if cs < b[i] then
  cs, cns, cc = b[i], 0, 0
end
-- A window that starts after now was reserved ahead: the current one is
-- closed.
local open = cs < ts or (cs == ts and cns <= tns)

-- The end of the window holding cs, and of the one after it.
local j1 = nil
for j = 1, #b - 1 do
  if b[j] > cs then
    j1 = j
    break
  end
end
if not j1 then
  error('floodgate: a calendar window state (' .. sstr .. ') beyond the boundaries the client sent')
end
local e1, e2 = b[j1], b[j1 + 1]

-- until writes value to key with a TTL until the instant (s, ns) from the
-- decision's instant, plus shift (lib.lua) and the margin, rounded up to
-- a millisecond: whole seconds in ms, then the rest, each exact.
local function until_(value, s, ns)
  local ms = (s - ts) * 1000 + ceildiv(ns - tns + shift, 1000000)
  write('SET', key, value, 'PX', int(math.max(ms, 0) + margin))
end

local allowed, granted, new = 0, 0, old
if op == OP_TAKE then
  local xs, xns, xc, xe = cs, cns, cc + n, e1
  if xc > limit then
    xs, xns, xc, xe = e1, 0, n, e2
  end
  local wait = math.max(sub(xs, xns, ts, tns), 0)
  if wait <= maxd then
    allowed, granted = 1, n
    delay = wait
    new = fmt(xs, xns) .. ':' .. int(xc)
    until_(new, xe, 0)
  end
elseif op == OP_TAKE_UP_TO then
  local m = 0
  if open then
    m = math.min(n, limit - cc)
  end
  if m > 0 then
    allowed, granted = 1, m
    new = fmt(cs, cns) .. ':' .. int(cc + m)
    until_(new, e1, 0)
  end
else -- OP_SETTLE
  -- Only in the window the units were counted in (the one holding the
  -- admission's instant holds cs).
  local as = parse(admitted)
  local inside = false
  for k = 1, #b - 1 do
    if b[k] <= as and as < b[k + 1] then
      inside = b[k] <= cs and cs < b[k + 1]
      break
    end
  end
  if inside then
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
      if xc > 0 then
        until_(new, e1, 0)
      else
        until_(new, cs, cns)
      end
    end
  end
end

return {ts, tns, old, new, allowed, granted}
