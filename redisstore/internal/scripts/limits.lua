-- limits.lua: step.Limits, a floodgate.Limits composite, as one atomic
-- script. LimitsSource puts it after time.lua, lib.lua and every
-- algorithm's file (after args.lua) as the function run[kind](KEYS, ARGV),
-- which takes one limit's step and replies as the algorithm's script does.
-- Every limit's step runs as a check, dry (lib.lua): it records its
-- writes, and they run once the composite has admitted, so that a denial by
-- one limit changes no limit's state, not even a TTL.
--
-- KEYS[i]  the state of limit i, as its algorithm's file says
-- ARGV     the decision's arguments as args.lua reads them, all of them
--          (ARGV[ARG_NOW] and ARGV[ARG_AT] "" when unset; ARGV[ARG_QUOTA],
--          ARGV[ARG_PERIOD] and ARGV[ARG_TAU] unread), then LIMIT_ARGS for
--          each limit i, from ARGV[ARG_LIMITS + LIMIT_ARGS * (i - 1)]: its
--          kind (a step.Kind), quota, period and tau, which its step reads
--          in place of the decision's (scripts.Args.LimitsARGV)
--
-- The steps are step.Limits':
--   take          each limit's take at now with the maximum delay; if one
--                 denies, nothing is written. Otherwise, with no delay, the
--                 takes' writes are the admission; else each limit takes
--                 the units again at T = now + the longest delay, with no
--                 delay (its instant T, its TTLs still counted from now:
--                 lib.lua's shift), and those writes are the admission.
--   take up to n  each limit's take up to n at now; m is the fewest units
--                 any granted. With m > 0, each limit that granted more
--                 takes m instead, and the writes are the admission.
--   settle        each limit's settlement, all written.
-- A check (the op's code plus CHECK_CODE) takes the same steps and writes
-- none of them.
--
-- Reply: {now's seconds, now's nanoseconds, written (0 or 1), then for each
-- step in the order taken: the limit's index i, the step's reply (as its
-- algorithm's script replies)}. redisstore runs step.Limits on these
-- replies (each checked against the limit's reference transition, as a
-- single script's) and checks that it took the same steps and kept what
-- the script wrote.
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME (the
-- one TIME time.lua read, so every limit's now is the same instant).

local op = ARGV[ARG_OP]
local check = op + 0 >= CHECK_CODE
if check then
  op = tostring(op - CHECK_CODE)
end
local units, instant, at = ARGV[ARG_N], ARGV[ARG_NOW], ARGV[ARG_AT]
local ts, tns = clock(instant)
local reply = {ts, tns, 0}
local pends = {}

-- take runs the step (sop, k units, maximum delay d) of limit i at the
-- instant x (a decimal, or "" for Redis TIME) as a check, records its
-- writes and its reply, and returns whether it admitted, the units granted
-- and the delay.
local function take(i, sop, k, d, x)
  local j = LIMIT_ARGS * (i - 1)
  local kind = ARGV[ARG_LIMITS + j + LIMIT_KIND]
  local argv = {}
  argv[ARG_OP], argv[ARG_N], argv[ARG_MAXDELAY], argv[ARG_MARGIN] = sop + CHECK_CODE, k, d, ARGV[ARG_MARGIN]
  argv[ARG_QUOTA] = ARGV[ARG_LIMITS + j + LIMIT_QUOTA]
  argv[ARG_PERIOD] = ARGV[ARG_LIMITS + j + LIMIT_PERIOD]
  argv[ARG_TAU] = ARGV[ARG_LIMITS + j + LIMIT_TAU]
  argv[ARG_NOW], argv[ARG_AT] = x, at
  delay = 0
  local r = run[kind]({KEYS[i]}, argv)
  pends[i] = pend
  reply[#reply + 1] = i
  reply[#reply + 1] = r
  if kind == KIND_SLIDING_LOG then
    return r[3] == 1, r[4], delay
  end
  return r[5] == 1, r[6], delay
end

local admitted = false
if op == OP_TAKE then
  local all, longest = true, 0
  for i = 1, #KEYS do
    local ok, _, d = take(i, OP_TAKE, units, ARGV[ARG_MAXDELAY], instant)
    all = all and ok
    longest = math.max(longest, d)
  end
  if all and longest > 0 then
    local t = fmt(add(ts, tns, longest))
    shift = longest
    for i = 1, #KEYS do
      if not take(i, OP_TAKE, units, 0, t) then
        error('floodgate: Limits[' .. (i - 1) .. '] denied at ' .. t .. ' the units it admitted for then')
      end
    end
  end
  admitted = all
elseif op == OP_TAKE_UP_TO then
  local m, got = units + 0, {}
  for i = 1, #KEYS do
    local _, g = take(i, OP_TAKE_UP_TO, units, 0, instant)
    got[i] = g
    m = math.min(m, g)
  end
  if m > 0 then
    for i = 1, #KEYS do
      if got[i] ~= m and not take(i, OP_TAKE, m, 0, instant) then
        error('floodgate: Limits[' .. (i - 1) .. '] denied the ' .. m .. ' units it had')
      end
    end
  end
  admitted = m > 0
else -- OP_SETTLE
  for i = 1, #KEYS do
    take(i, OP_SETTLE, units, 0, instant)
  end
  admitted = true
end

if admitted and not check then
  for i = 1, #KEYS do
    for _, c in ipairs(pends[i]) do
      redis.call(unpack(c))
    end
  end
  reply[3] = 1
end
return reply
