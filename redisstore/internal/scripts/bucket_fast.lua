-- bucket_fast.lua: the common case of tokenbucket.lua and leakybucket.lua,
-- run before lib.lua's definitions (each costs a closure per call) and
-- written out without its helpers: a take on Redis TIME, on a missing key
-- or a state of 19 digits (an instant from 2001 to 2286, which holds every
-- state a take on Redis TIME writes before MAX_UNIX). Anything else falls
-- through to the algorithm's script. Both buckets keep one instant (the
-- token bucket's TAT, the leaky bucket's tail) and move it the same way;
-- they differ only in the admission test, chosen by `leaky`, which Source
-- sets before this file. The fast path and the general script make the
-- decision of the algorithm's transition in package step (step.TokenBucket,
-- step.LeakyBucket) with the same exact (seconds, nanoseconds) arithmetic
-- (see lib.lua), and write the same state and TTL; redisstore checks every
-- reply against the transition.
--
-- KEYS     none: fast(key, ARGV, t, probe) takes the decision's key, its
--          state as the algorithm's file says
-- ARGV     the decision's (the algorithm's file says what they mean):
--          ARGV[ARG_N], ARGV[ARG_MAXDELAY], ARGV[ARG_MARGIN],
--          ARGV[ARG_PERIOD] and ARGV[ARG_TAU]; the caller runs fast only
--          for a take (ARGV[ARG_OP] is OP_TAKE) on Redis TIME (no
--          ARGV[ARG_NOW])
-- Reply:   the algorithm's file's reply as one string (see scripts.go), or
--          nil to fall through. Then, for an admission, the new state and
--          its TTL (ms, a decimal) and whether the units wait (a delay);
--          with probe set, fast writes nothing and its caller (limits.lua's
--          fast path) writes them.
-- Time:    t, the TIME time.lua read (before MAX_UNIX s)
local function fast(key, ARGV, t, probe)
  -- The arguments (the algorithm's file says what they are), read first:
  -- n also as the string at hand for the reply, the margin as a string
  -- until the TTL adds it. Arithmetic converts the decimal strings, at half
  -- the cost of tonumber calls.
  local units, maxd, margin = ARGV[ARG_N], ARGV[ARG_MAXDELAY] + 0, ARGV[ARG_MARGIN]
  local n, interval, tau = units + 0, ARGV[ARG_PERIOD] + 0, ARGV[ARG_TAU] + 0
  local old = redis.call('GET', key)
  local as, ans = 0, 0
  if old then
    as = nil
    if #old == 19 then
      as, ans = tonumber(string.sub(old, 1, 10)), tonumber(string.sub(old, 11))
      if not (as and ans and as % 1 == 0 and ans % 1 == 0 and as >= 1e9 and ans >= 0 and ans < 1e9) then
        as = nil
      end
    end
    if not as then
      return nil
    end
  end
  local ts, tns = t[1] + 0, t[2] * 1000
  -- b = base - now, base = max(state, now), as in both scripts.
  local bs, bns, b = ts, tns, 0
  local o = (as - ts) * 1e9 + (ans - tns)
  if o > 0 then
    bs, bns, b = as, ans, o
  end
  local d = n * interval
  local flags, new, px = ' 0 0', old or '0', nil
  local admit, later
  if leaky then
    -- The queue ahead plus this request fits in the bucket, and the
    -- departure is within the maximum delay (leakybucket.lua).
    admit, later = b + d <= tau and b <= maxd, b > 0
  else
    -- The request conforms within the maximum delay (GCRA,
    -- tokenbucket.lua).
    admit, later = (b - tau) + d <= maxd, (b - tau) + d > 0
  end
  if admit then
    flags = ' 1 ' .. units
    -- The new state base + d, and its TTL: b + d rounded up to a
    -- millisecond, plus the margin.
    local x = bns + d
    local r = math.fmod(x, 1e9)
    new = string.format('%d%09d', bs + (x - r) / 1e9, r)
    x = b + d
    r = math.fmod(x, 1e6)
    x = (x - r) / 1e6
    if r > 0 then
      x = x + 1
    end
    px = string.format('%d', x + margin)
    if not probe then
      redis.call('SET', key, new, 'PX', px)
    end
  end
  -- The reply of the general scripts as one string (see scripts.go),
  -- joined from strings at hand: no number is formatted.
  return t[1] .. ' ' .. t[2] .. '000 ' .. (old or '0') .. ' ' .. new .. flags, new, px, later
end
