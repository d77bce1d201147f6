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
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), old state, new
-- state, allowed (0 or 1), granted}, the states as stored ("" for a
-- missing key). A step that admits nothing still writes the state moved to
-- the current sub-window when that changed it; a dry step (a check)
-- replies the state it would write. redisstore re-runs step.SubWindow on
-- the old state and now to build the Result, and checks that it agrees
-- with the reply. An admitted take sets delay (lib.lua).
--
-- The common case, a take in the sub-window of the newest count, reads
-- the header and one count and rewrites them: O(1). Moving to a later
-- sub-window decodes and re-encodes the S+1 counts, once per sub-window
-- and key.
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME.
-- Sub-windows are aligned to the Unix epoch. The TTL is the time until the
-- newest sub-window's count leaves (S+1 sub-windows after its start) plus
-- the margin.

local limit, s, gu = quota, tau, period / 1000
local size = 7 * (s + 4)

-- num reads the 7-byte integer at byte offset p (from 0) of str.
local function num(str, p)
  local b1, b2, b3, b4, b5, b6, b7 = string.byte(str, p + 1, p + 7)
  return b1 + 256 * (b2 + 256 * (b3 + 256 * (b4 + 256 * (b5 + 256 * (b6 + 256 * b7)))))
end

-- enc returns the 7 bytes of the integer v (0 <= v < 2^53).
local function enc(v)
  local b = {}
  for i = 1, 7 do
    local r = v % 256
    b[i] = r
    v = (v - r) / 256
  end
  return string.char(b[1], b[2], b[3], b[4], b[5], b[6], b[7])
end

local old = redis.call('GET', key) or ''
local newest, total, sub = 0, 0, 0
local k = 0 -- the stored state's number of counts
if old ~= '' then
  k = #old / 7 - 3
  if k < 1 or k % 1 ~= 0 then
    error('floodgate: corrupt sub-window state')
  end
  newest, total, sub = num(old, 0), num(old, 7), num(old, 14)
end

local tus, tsub = fdiv(tns, 1000)
tus = ts * 1000000 + tus -- now in microseconds, and tsub ns past it
local c = fdiv(tus, gu)  -- the current sub-window

-- cnt holds the counts, decoded, when the step changes more than one
-- (cnt[j % (s+1)] is sub-window j's); nil while the stored string serves.
local cnt = nil
local function slot(j)
  local _, r = fdiv(j, s + 1)
  return r
end
local function decode()
  cnt = {}
  for i = 0, s do
    cnt[i] = num(old, 21 + 7 * i)
  end
end

-- Fit: a state written with another sub-window length or S keeps its total
-- in the sub-window holding the last instant of its newest one.
if old == '' or sub ~= gu or k ~= s + 1 then
  local nw = 0
  if total > 0 and sub > 0 then
    nw = fdiv((newest + 1) * sub - 1, gu)
  end
  cnt = {}
  for i = 0, s do
    cnt[i] = 0
  end
  cnt[slot(nw)] = total
  newest = nw
end

-- advance moves the newest sub-window to m > newest: counts leaving the
-- S+1 kept are dropped when dead at c (older than c - s), else added to the
-- oldest kept sub-window, m - s.
local function advance(m)
  if not cnt then
    decode()
  end
  local fold = 0
  for j = newest - s, math.min(newest, m - s - 1) do
    local i = slot(j)
    local v = cnt[i]
    if v ~= 0 then
      cnt[i] = 0
      if j < c - s then
        total = total - v
      else
        fold = fold + v
      end
    end
  end
  if m - newest > s then
    for i = 0, s do
      cnt[i] = 0
    end
  end
  newest = m
  local i = slot(m - s)
  cnt[i] = cnt[i] + fold
end

if c > newest then
  advance(c)
end

-- earliest returns the first sub-window after newest at whose start n
-- more units fit under lim, counts older by more than s having left.
local function earliest(lim, units)
  if not cnt then
    decode()
  end
  local left = total
  for j = newest - s, newest do
    left = left - cnt[slot(j)]
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

-- count counts v more units in sub-window j: in cnt when decoded, else as
-- the one count that changes (one), cnt set to false.
local one = nil
local function count(j, v)
  local i = slot(j)
  if cnt then
    cnt[i] = cnt[i] + v
  else
    local p = 21 + 7 * i
    cnt = false -- the one count changed, written below
    one = {p, num(old, p) + v}
  end
  total = total + v
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
    j = math.max(j, newest - s)
    if not cnt then
      decode()
    end
    local i = slot(j)
    if n > 0 then
      granted = math.min(n, math.max(2 * limit - total, 0))
      cnt[i] = cnt[i] + granted
      total = total + granted
    else
      granted = math.min(-n, cnt[i])
      cnt[i] = cnt[i] - granted
      total = total - granted
    end
    if granted > 0 then
      allowed = 1
    end
  end
end

local new = old
if cnt then
  local parts = {enc(newest), enc(total), enc(gu)}
  for i = 0, s do
    parts[i + 4] = enc(cnt[i])
  end
  new = table.concat(parts)
elseif cnt == false then
  -- One count changed in place: the header's total and that count.
  local p, v = one[1], one[2]
  new = string.sub(old, 1, 7) .. enc(total) .. string.sub(old, 15, p) .. enc(v) .. string.sub(old, p + 8)
end
if new ~= old then
  -- The state is a missing key once the newest sub-window's count has
  -- left: S+1 sub-windows after its start.
  local left = (newest + s + 1) * gu - tus
  write('SET', key, new, 'PX', int(ceildiv(math.max(left, 0), 1000) + margin))
end
return {ts, tns, old, new, allowed, granted}
