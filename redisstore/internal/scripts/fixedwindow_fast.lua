-- fixedwindow_fast.lua: the common case of fixedwindow.lua, run before
-- lib.lua's definitions (each costs a closure per call) and written out
-- without its helpers: a take on Redis TIME, on a missing key or a state
-- whose start has 19 digits (2001 to 2286, which holds every start a take
-- on Redis TIME writes before MAX_UNIX). Anything else falls through to
-- fixedwindow.lua. Both make the decision of step.FixedWindow with the
-- same exact (seconds, nanoseconds) arithmetic (see lib.lua), and write the
-- same state and TTL; redisstore checks every reply against step.FixedWindow.
--
-- KEYS     none: fast(key, ARGV, t, probe) takes the decision's key, its
--          state as fixedwindow.lua says
-- ARGV     the decision's (fixedwindow.lua says what they mean):
--          ARGV[ARG_N], ARGV[ARG_MAXDELAY], ARGV[ARG_MARGIN],
--          ARGV[ARG_QUOTA] and ARGV[ARG_PERIOD]; the caller runs fast only
--          for a take (ARGV[ARG_OP] is OP_TAKE) on Redis TIME (no
--          ARGV[ARG_NOW])
-- Reply:   fixedwindow.lua's reply as one string (see scripts.go), or nil
--          to fall through. Then, for an admission, the new state and its
--          TTL (ms, a decimal) and whether the units wait (a delay); with
--          probe set, fast writes nothing and its caller (limits.lua's
--          fast path) writes them.
-- Time:    t, the TIME time.lua read (before MAX_UNIX s)
local function fast(key, ARGV, t, probe)
  -- The arguments (fixedwindow.lua says what they are), read first:
  -- n also as the string at hand for the reply, the margin as a string
  -- until the TTL adds it. Arithmetic converts the decimal strings, at half
  -- the cost of tonumber calls.
  local units, maxd, margin = ARGV[ARG_N], ARGV[ARG_MAXDELAY] + 0, ARGV[ARG_MARGIN]
  local n, limit, w = units + 0, ARGV[ARG_QUOTA] + 0, ARGV[ARG_PERIOD] + 0
  local old = redis.call('GET', key)
  local ss, sns, cnt = 0, 0, 0
  if old then
    ss = nil
    -- "start:count", the start in 19 digits.
    if #old >= 21 and string.byte(old, 20) == 58 then
      ss, sns, cnt = tonumber(string.sub(old, 1, 10)), tonumber(string.sub(old, 11, 19)), tonumber(string.sub(old, 21))
      if not (ss and sns and cnt and ss % 1 == 0 and sns % 1 == 0 and cnt % 1 == 0 and ss >= 1e9 and sns >= 0 and cnt >= 0) then
        ss = nil
      end
    end
    if not ss then
      return nil
    end
  end
  local ts, tns = t[1] + 0, t[2] * 1000
  -- Offsets from now: the stored window's start, the current window's (in
  -- (-w, 0]; the instant is whole microseconds, and so are windows).
  local so = (ss - ts) * 1e9 + (sns - tns)
  local wo = -math.fmod(ts * 1000000 + t[2], w / 1000) * 1000
  local cs, cns, co, cc = ss, sns, so, cnt
  if so < wo then
    local x = tns + wo
    local r = math.fmod(x, 1e9)
    if r < 0 then
      r = r + 1e9
    end
    cs, cns, co, cc = ts + (x - r) / 1e9, r, wo, 0
  end
  -- Into the current window if it has room, else the next one.
  local xs, xns, xo, xc = cs, cns, co, cc + n
  if xc > limit then
    local x = cns + w
    local r = math.fmod(x, 1e9)
    xs, xns, xo, xc = cs + (x - r) / 1e9, r, co + w, n
  end
  local flags, new, px = ' 0 0', old or '0:0', nil
  if math.max(xo, 0) <= maxd then
    flags = ' 1 ' .. units
    new = string.format('%d%09d:%d', xs, xns, xc)
    -- The TTL: until the window ends, rounded up to a millisecond, plus
    -- the margin.
    local d = math.max(xo + w, 0)
    local r = math.fmod(d, 1e6)
    d = (d - r) / 1e6
    if r > 0 then
      d = d + 1
    end
    px = string.format('%d', d + margin)
    if not probe then
      redis.call('SET', key, new, 'PX', px)
    end
  end
  -- The reply of fixedwindow.lua as one string (see scripts.go), joined
  -- from strings at hand: no number is formatted.
  return t[1] .. ' ' .. t[2] .. '000 ' .. (old or '0:0') .. ' ' .. new .. flags, new, px, xo > 0
end
