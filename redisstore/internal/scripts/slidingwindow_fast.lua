-- slidingwindow_fast.lua: the common case of slidingwindow.lua, run before
-- lib.lua's definitions (each costs a closure per call) and written out
-- without its helpers: a take without delay (ARGV[ARG_MAXDELAY] is 0, as
-- Allow sends) on Redis TIME, on a missing key or a state whose start has
-- 19 digits (2001 to 2286, which holds every start a take on Redis TIME
-- writes before MAX_UNIX). Anything else falls through to
-- slidingwindow.lua. Without delay, a take is admitted exactly when its
-- units fit the estimate now, (L - curr) - prev*(W - e)/W in the order of
-- operations of package step's swAvail, which this file computes as
-- slidingwindow.lua does; a state reserved ahead admits nothing now. Both
-- write the same state and TTL; redisstore checks every reply against
-- step.SlidingWindow.
--
-- KEYS     none: fast(key, ARGV, t, probe) takes the decision's key, its
--          state as slidingwindow.lua says
-- ARGV     the decision's (slidingwindow.lua says what they mean):
--          ARGV[ARG_N], ARGV[ARG_MAXDELAY], ARGV[ARG_MARGIN],
--          ARGV[ARG_QUOTA] and ARGV[ARG_PERIOD]; the caller runs fast only
--          for a take (ARGV[ARG_OP] is OP_TAKE) on Redis TIME (no
--          ARGV[ARG_NOW])
-- Reply:   slidingwindow.lua's reply as one string (see scripts.go), or
--          nil to fall through. Then, for an admission, the new state and
--          its TTL (ms, a decimal) and false (the units never wait); with
--          probe set, fast writes nothing and its caller (limits.lua's
--          fast path) writes them.
-- Time:    t, the TIME time.lua read (before MAX_UNIX s)
local function fast(key, ARGV, t, probe)
  -- The arguments (slidingwindow.lua says what they are), read first:
  -- n also as the string at hand for the reply, the margin as a string
  -- until the TTL adds it. Arithmetic converts the decimal strings, at half
  -- the cost of tonumber calls.
  local units, maxd, margin = ARGV[ARG_N], ARGV[ARG_MAXDELAY] + 0, ARGV[ARG_MARGIN]
  if maxd ~= 0 then
    return nil
  end
  local n, limit, w = units + 0, ARGV[ARG_QUOTA] + 0, ARGV[ARG_PERIOD] + 0
  local old = redis.call('GET', key)
  local ss, sns, p, c = 0, 0, 0, 0
  if old then
    ss = nil
    -- "start:prev:curr", the start in 19 digits.
    if #old >= 23 and string.byte(old, 20) == 58 then
      local j = string.find(old, ':', 21, true)
      if j then
        ss, sns = tonumber(string.sub(old, 1, 10)), tonumber(string.sub(old, 11, 19))
        p, c = tonumber(string.sub(old, 21, j - 1)), tonumber(string.sub(old, j + 1))
        if not (ss and sns and p and c and ss % 1 == 0 and sns % 1 == 0 and p % 1 == 0 and c % 1 == 0 and ss >= 1e9 and sns >= 0 and p >= 0 and c >= 0) then
          ss = nil
        end
      end
    end
    if not ss then
      return nil
    end
  end
  local ts, tns = t[1] + 0, t[2] * 1000
  -- Offsets from now: the stored window's start, the current window's (in
  -- (-w, 0]; the instant is whole microseconds, and so are windows). A
  -- missing key is a window long past.
  local so = (ss - ts) * 1e9 + (sns - tns)
  if not old then
    so = -math.huge
  end
  local wo = -math.fmod(ts * 1000000 + t[2], w / 1000) * 1000
  -- The state rolled forward to the current window: its current count
  -- becomes the previous one a window later, and both empty after two.
  local cs, cns, co, cp, cc = ss, sns, so, p, c
  if so < wo then
    local x = tns + wo
    local r = math.fmod(x, 1e9)
    if r < 0 then
      r = r + 1e9
    end
    cs, cns, co = ts + (x - r) / 1e9, r, wo
    if so == wo - w then
      cp, cc = c, 0
    else
      cp, cc = 0, 0
    end
  end
  local flags, new, px = ' 0 0', old or '0:0:0', nil
  if co <= 0 and n <= (limit - cc) - cp * (w + co) / w then
    flags = ' 1 ' .. units
    new = string.format('%d%09d:%d:%d', cs, cns, cp, cc + n)
    -- The TTL: until the state rolls to empty, two windows after its
    -- start, rounded up to a millisecond, plus the margin.
    local d = math.max(co + 2 * w, 0)
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
  -- The reply of slidingwindow.lua as one string (see scripts.go), joined
  -- from strings at hand.
  return t[1] .. ' ' .. t[2] .. '000 ' .. (old or '0:0:0') .. ' ' .. new .. flags, new, px, false
end
