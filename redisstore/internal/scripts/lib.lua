-- lib.lua: helpers shared by every floodgate script. Source puts this file
-- after time.lua (and the fast path, if any) and before args.lua and the
-- algorithm's file; it is not a script alone.
--
-- KEYS     none: the helpers take what they need as arguments
-- ARGV     none
-- Reply:   none; it only defines local functions, and the state of dry
--          runs (dry, pend, delay, shift; see below).
-- Time:    clock returns the client's clock when the decision brings it,
--          else the TIME time.lua read.
--
-- Numbers. Lua numbers are IEEE doubles, so integers are exact only up to
-- 2^53, and an instant in nanoseconds since the Unix epoch (about 1.8e18
-- today) is not. Instants therefore travel as decimal strings and are held
-- as pairs (s, ns): whole seconds and 0 <= ns < 1e9, each exact. Only
-- differences of instants are single numbers, and floodgate bounds every
-- difference a decision depends on (windows, restore times, delays) by
-- floodgate.MaxWindow and floodgate.MaxDelay, which keep them below 2^53
-- and so exact. New instants are always an exact pair plus a bounded
-- offset.
--
-- Writes. Every key written gets a TTL: the time until its state is
-- equivalent to a missing key (the quota fully restored), rounded up to a
-- millisecond, plus a margin in whole milliseconds (ARGV[ARG_MARGIN]). A
-- denial writes nothing.
--
-- Dry runs. The algorithms' files change keys only through write (keep is
-- write's SET with a TTL), so that a step can run without changing
-- anything: with dry set, write records each command in pend instead of
-- running it. args.lua sets dry for each decision, for a check-only one:
-- a check drops the record; limits.lua steps every limit as a check and
-- runs the records of all of them once every limit has admitted. An
-- algorithm's file that reads its key after a write it made reads it as
-- the write would have left it (slidinglog.lua keeps that view itself).
-- delay is where a take reports the delay of its admission, and shift is
-- added to every TTL: limits.lua runs a limit's take at an instant after
-- now, whose TTLs still count from now. (batch.lua, which pcalls each
-- decision, never assigns dry itself: the Lua of miniredis, which the tests
-- run on, closes the calling chunk's upvalues when a pcall catches an
-- error, after which the chunk's own assignments no longer reach write.)

local E9 = 1000000000

local dry, pend, delay, shift = false, nil, 0, 0

-- fdiv returns floor(a/b) and a - b*floor(a/b) for integers a and b > 0,
-- exactly when |a| + b <= 2^53 (every caller's case): math.fmod is exact,
-- and so is the division of an exact multiple.
local function fdiv(a, b)
  local r = math.fmod(a, b)
  if r < 0 then
    r = r + b
  end
  return (a - r) / b, r
end

-- ceildiv returns ceil(a/b) for integers a and b > 0.
local function ceildiv(a, b)
  local q, r = fdiv(a, b)
  if r > 0 then
    q = q + 1
  end
  return q
end

-- parse returns the pair of an instant given as a decimal int64 string.
-- It is on every decision's path, so it checks only what it must to stay
-- exact (integral parts, at most 20 characters): redisstore parses the
-- states a script returns strictly and fails a decision on a state that
-- floodgate did not write.
local function parse(str)
  local n = #str
  if n <= 15 then
    -- Below 10^15 < 2^53: one exact number.
    local v = tonumber(str)
    if v and v % 1 == 0 then
      return fdiv(v, E9)
    end
  elseif n <= 20 then
    local s, ns = tonumber(string.sub(str, 1, n - 9)), tonumber(string.sub(str, n - 8))
    if s and ns and s % 1 == 0 and ns % 1 == 0 and ns >= 0 then
      if s >= 0 then
        return s, ns
      elseif ns > 0 then
        return s - 1, E9 - ns
      end
      return s, 0
    end
  end
  error('floodgate: not an instant: ' .. str)
end

-- fmt returns the canonical decimal string of the instant (s, ns).
local function fmt(s, ns)
  if s < 0 then
    if ns > 0 then
      s, ns = -s - 1, E9 - ns
    else
      s = -s
    end
    if s == 0 then
      return string.format('-%d', ns)
    end
    return string.format('-%d%09d', s, ns)
  end
  if s == 0 then
    return string.format('%d', ns)
  end
  return string.format('%d%09d', s, ns)
end

-- sub returns the instant a minus the instant b in nanoseconds. It is exact
-- when |a - b| <= 2^53; beyond that it is rounded, but never to a number
-- of magnitude below 2^53, so it still compares correctly with every
-- offset a decision uses.
local function sub(as, ans, bs, bns)
  return (as - bs) * E9 + (ans - bns)
end

-- add returns the instant (s, ns) plus d nanoseconds, exactly for every
-- offset a decision adds, at most two windows ahead or one back, windows
-- being at most floodgate.MaxWindow: the multiple of 1e9 that fdiv divides
-- stays within 2^53.
local function add(s, ns, d)
  local q, r = fdiv(d, E9)
  ns = ns + r
  if ns >= E9 then
    return s + q + 1, ns - E9
  end
  return s + q, ns
end

-- same reports whether two pairs are the same instant.
local function same(as, ans, bs, bns)
  return as == bs and ans == bns
end

-- clock returns the decision's instant: the client's clock when arg (the
-- decision's ARGV[ARG_NOW]) holds one, else the Redis server's TIME
-- (microseconds), which time.lua read.
local function clock(arg)
  if arg and arg ~= '' then
    return parse(arg)
  end
  if not serverTime then
    error('floodgate: the server clock is at or past ' .. MAX_UNIX .. ' s since the Unix epoch')
  end
  return serverTime[1] + 0, serverTime[2] * 1000
end

-- wmod returns the offset of the instant (s, ns) into its epoch-aligned
-- window of wu microseconds, in ns. The instant in microseconds is exact
-- for |s| < MAX_UNIX, and windows are whole microseconds.
local function wmod(s, ns, wu)
  local us, nsr = fdiv(ns, 1000)
  local _, r = fdiv(s * 1000000 + us, wu)
  return r * 1000 + nsr
end

-- wstart returns the start of the epoch-aligned window of wu microseconds
-- holding the instant (s, ns), or nil when the instant is too far from the
-- present for any window a decision looks at.
local function wstart(s, ns, wu)
  if s >= MAX_UNIX or s <= -MAX_UNIX then
    return nil
  end
  return add(s, ns, -wmod(s, ns, wu))
end

-- int formats an integer exactly (tostring would use %.14g).
local function int(x)
  return string.format('%d', x)
end

-- write runs the command of its arguments, which changes a key, or, dry,
-- appends them to pend.
local function write(...)
  if dry then
    pend[#pend + 1] = {...}
  else
    redis.call(...)
  end
end

-- ttl returns the TTL, in ms, of a state that is equivalent to a missing
-- key d ns after the decision's instant: d plus shift (the decision's
-- instant minus now), rounded up to a whole millisecond, plus the margin.
local function ttl(d, margin)
  return int(ceildiv(math.max(d + shift, 0), 1000000) + margin)
end

-- keep writes value to key with the TTL of a state restored d ns after the
-- decision's instant. A state with d <= 0 is equivalent to a missing key
-- from now on, but it is still written, for the margin: a clock that steps
-- back a little must find it, as the reference would.
local function keep(key, value, d, margin)
  write('SET', key, value, 'PX', ttl(d, margin))
end
