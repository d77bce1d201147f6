-- subwindow.lua: step.SubWindow, the sliding window with sub-windows
-- (floodgate.SlidingWindow with SubWindows of 2 or more), as one atomic
-- script.
--
-- KEYS[1]  the key's state: a string of 7-byte little-endian unsigned
--          integers, the newest sub-window's index, the total counted,
--          the sub-window length in microseconds, then the S+1 counts,
--          sub-window j's at position j mod (S+1); 7*(S+4) bytes (448 at
--          S = 60). Missing means a new key. Counts and totals are at
--          most 2*MAX_QUOTA < 2^53, indexes below 2^53 and lengths below
--          2^45 microseconds, so every field is an exact double.
-- ARGV     as args.lua reads them, where
--   ARGV[ARG_QUOTA]   quota is the limit
--   ARGV[ARG_PERIOD]  period is the sub-window length, in ns: a whole
--                     number of microseconds
--   ARGV[ARG_TAU]     tau is S, the number of sub-windows (2 to 64)
--   ARGV[ARG_AT]      admitted, for a settlement, is the instant the
--                     units were admitted for
--
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), old state, the
-- new state's first 21 bytes (newest, total, sub-window), allowed (0 or
-- 1), granted}, the old state as stored ("" for a missing key): the
-- counts are not sent back (at S = 60 they would double the reply), and
-- the next step's old state shows them, whose counts redisstore checks
-- add up to its total. A step that admits nothing still writes the state
-- moved to the current sub-window when that changed it; a dry step (a
-- check) replies the state it would write. redisstore re-runs
-- step.SubWindow on the old state and now to build the Result, and checks
-- that it agrees with the reply. An admitted take sets delay (lib.lua).
--
-- Every step is O(1) Lua operations but when a sub-window's count leaves
-- alive (a reservation folds it) or a reservation looks for the earliest
-- sub-window with room (O(S)); the counts live in one string, changed by
-- slicing. subwindow_fast.lua decides the common case, a take without
-- delay on Redis TIME, before lib.lua, and defines the integer codec this
-- file uses.
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME.
-- Sub-windows are aligned to the Unix epoch. The TTL is the time until the
-- newest sub-window's count leaves (S+1 sub-windows after its start) plus
-- the margin.

local limit, s, gu = quota, tau, period / 1000
-- Z7, num and enc are subwindow_fast.lua's, which Source puts first.

local old = redis.call('GET', key) or ''
local newest, total, sub, k = 0, 0, 0, 0
if old ~= '' then
  k = #old / 7 - 3 -- the stored state's number of counts
  if k < 1 or k % 1 ~= 0 then
    error('floodgate: corrupt sub-window state')
  end
  newest, total, sub = num(old, 0), num(old, 7), num(old, 14)
end

local tus, tsub = fdiv(tns, 1000)
tus = ts * 1000000 + tus -- now in microseconds, and tsub ns past it
local c = fdiv(tus, gu)  -- the current sub-window

-- ring holds the S+1 counts, 7 bytes each, sub-window j's at position
-- slot(j); changed says whether the state differs from old.
local ring, changed = string.sub(old, 22), false
local function slot(j)
  local _, r = fdiv(j, s + 1)
  return r
end
local function get(i)
  return num(ring, 7 * i)
end
local function set(i, v)
  ring = string.sub(ring, 1, 7 * i) .. enc(v) .. string.sub(ring, 7 * i + 8)
end

-- Fit: a state written with another sub-window length or S keeps its total
-- in the sub-window holding the last instant of its newest one.
if old == '' or sub ~= gu or k ~= s + 1 then
  local nw = 0
  if total > 0 and sub > 0 then
    nw = fdiv((newest + 1) * sub - 1, gu)
  end
  ring, newest, changed = string.rep(Z7, s + 1), nw, true
  if total > 0 then
    set(slot(nw), total)
  end
end

-- advance moves the newest sub-window to m > newest: counts leaving the
-- S+1 kept are dropped when dead at c (older than c - s), else added to the
-- oldest kept sub-window, m - s.
local function advance(m)
  local first, last = newest - s, math.min(newest, m - s - 1)
  local fold = 0
  if last - first >= s and last < c - s then
    -- All of them leave, all dead: nothing to read.
    ring, total = string.rep(Z7, s + 1), 0
  elseif last >= first then
    for j = first, last do
      local v = get(slot(j))
      if j < c - s then
        total = total - v
      else
        fold = fold + v
      end
    end
    -- Zero the positions of first..last (contiguous, modulo s + 1).
    local i0, n0 = slot(first), last - first + 1
    if i0 + n0 <= s + 1 then
      ring = string.sub(ring, 1, 7 * i0) .. string.rep(Z7, n0) .. string.sub(ring, 7 * (i0 + n0) + 1)
    else
      local n2 = i0 + n0 - (s + 1)
      ring = string.rep(Z7, n2) .. string.sub(ring, 7 * n2 + 1, 7 * i0) .. string.rep(Z7, s + 1 - i0)
    end
  end
  newest, changed = m, true
  if fold > 0 then
    local i = slot(m - s)
    set(i, get(i) + fold)
  end
end

if c > newest then
  advance(c)
end

-- earliest returns the first sub-window after newest at whose start n
-- more units fit under lim, counts older by more than s having left.
local function earliest(lim, units)
  local left = total
  for j = newest - s, newest do
    left = left - get(slot(j))
    if left + units <= lim then
      return j + s + 1
    end
  end
  return -1
end

-- waitns returns the time from now to the start of sub-window m in ns, or
-- math.huge when that is beyond any maximum delay (2^43 microseconds).
local function waitns(m)
  local du = m * gu - tus
  if du > 8796093022208 then
    return math.huge
  end
  return du * 1000 - tsub
end

-- count counts v more units in sub-window j.
local function count(j, v)
  local i = slot(j)
  set(i, get(i) + v)
  total, changed = total + v, true
end

local allowed, granted = 0, 0
local into = math.max(c, newest - s)
if op == OP_TAKE then
  if total + n <= limit then
    count(into, n)
    allowed, granted = 1, n
  else
    local m = earliest(limit, n)
    local wait = waitns(m)
    local retry = wait - maxd
    if total + n > 2 * limit then
      retry = math.max(retry, waitns(earliest(2 * limit, n)))
    end
    if retry <= 0 then
      advance(m)
      count(m, n)
      allowed, granted, delay = 1, n, wait
    end
  end
elseif op == OP_TAKE_UP_TO then
  local got = math.min(n, math.max(limit - total, 0))
  if got > 0 then
    count(into, got)
    allowed, granted = 1, got
  end
else -- OP_SETTLE: in the sub-window of At while it is counted.
  local as, ans = parse(admitted)
  local aus = fdiv(ans, 1000)
  local j = fdiv(as * 1000000 + aus, gu)
  if j >= c - s and j <= newest then
    local i = slot(math.max(j, newest - s))
    local v = get(i)
    if n > 0 then
      granted = math.min(n, math.max(2 * limit - total, 0))
      v, total = v + granted, total + granted
    else
      granted = math.min(-n, v)
      v, total = v - granted, total - granted
    end
    if granted > 0 then
      allowed, changed = 1, true
      set(i, v)
    end
  end
end

local new = old
if changed then
  new = enc(newest) .. enc(total) .. enc(gu) .. ring
  -- The state is a missing key once the newest sub-window's count has
  -- left: S+1 sub-windows after its start.
  local left = (newest + s + 1) * gu - tus
  write('SET', key, new, 'PX', int(ceildiv(math.max(left, 0), 1000) + margin))
end
return {ts, tns, old, string.sub(new, 1, 21), allowed, granted}
