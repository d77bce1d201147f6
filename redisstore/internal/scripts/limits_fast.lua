-- limits_fast.lua: the common case of limits.lua, run before lib.lua's
-- definitions (each costs a closure per call): a take, not a check, on
-- Redis TIME, of limits that all have a fast path (every kind but the
-- sliding log). Each limit's fast path, in fasts by kind, takes the units
-- with probe set: it replies as its algorithm's script does and writes
-- nothing. When every limit admits at once, their writes run; when one
-- denies, none does; either way the reply is limits.lua's. Anything else
-- falls through to limits.lua, which takes the same steps: units that
-- every limit admits but one only with a delay (each must take them again
-- at the instant they proceed), a state a fast path does not read, a
-- sliding log. redisstore checks the reply against step.Limits as
-- limits.lua's.
--
-- KEYS     as limits.lua's: KEYS[i] is limit i's state (limitsFast takes
--          the decision's KEYS and ARGV, as limits_batch.lua calls it)
-- ARGV     as limits.lua's: ARGV[ARG_N], ARGV[ARG_MAXDELAY] and
--          ARGV[ARG_MARGIN] for every limit, and each limit's kind,
--          quota, period and tau from ARGV[ARG_LIMITS + LIMIT_ARGS *
--          (i - 1)]; LimitsSource calls it only for a take (ARGV[ARG_OP]
--          is OP_TAKE) on Redis TIME (ARGV[ARG_NOW] is "")
-- Reply:   limits.lua's elements as one string (see scripts.go): now's
--          seconds and nanoseconds, written, then each limit's index and
--          its fast path's reply (itself six elements); or nil to fall
--          through
-- Time:    t, the TIME time.lua read (before MAX_UNIX s)
local function limitsFast(KEYS, ARGV, t)
  local parts, news, ttls = {}, {}, {}
  -- One argument table serves every limit: a fast path reads its
  -- arguments first.
  local a, all, later = {}, true, false
  a[ARG_N], a[ARG_MAXDELAY], a[ARG_MARGIN] = ARGV[ARG_N], ARGV[ARG_MAXDELAY], ARGV[ARG_MARGIN]
  for i = 1, #KEYS do
    local j = LIMIT_ARGS * (i - 1)
    local f = fasts[ARGV[ARG_LIMITS + j + LIMIT_KIND]]
    if not f then
      return nil
    end
    a[ARG_QUOTA], a[ARG_PERIOD], a[ARG_TAU] = ARGV[ARG_LIMITS + j + LIMIT_QUOTA], ARGV[ARG_LIMITS + j + LIMIT_PERIOD], ARGV[ARG_LIMITS + j + LIMIT_TAU]
    local r, new, px, wait = f(KEYS[i], a, t, true)
    if not r then
      return nil
    end
    all, later = all and px ~= nil, later or (px ~= nil and wait)
    news[i], ttls[i] = new, px
    parts[#parts + 1] = i
    parts[#parts + 1] = r
  end
  local wrote = ' 0 '
  if all then
    if later then
      return nil
    end
    for i = 1, #KEYS do
      redis.call('SET', KEYS[i], news[i], 'PX', ttls[i])
    end
    wrote = ' 1 '
  end
  return t[1] .. ' ' .. t[2] .. '000' .. wrote .. table.concat(parts, ' ')
end
