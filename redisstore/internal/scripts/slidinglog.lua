-- slidinglog.lua: step.SlidingLog, the exact sliding window's reference
-- transition, as one atomic script.
--
-- KEYS[1]  the key's log: a sorted set. Member "b" holds the base B as its
--          score. Every other member is an admission instant in decimal
--          nanoseconds since the Unix epoch, one per instant, whose score is
--          B plus the units admitted up to and including it. Scores grow
--          strictly with time, so "b" is always first, the units in the log
--          are the newest score minus B, and the entry at which k units have
--          left the window is found with one ZRANGEBYSCORE. The log holds at
--          most limit entries (each holds at least one unit). A missing key
--          is an empty log.
-- ARGV     as args.lua reads them, where
--   ARGV[ARG_QUOTA]   quota is the limit
--   ARGV[ARG_PERIOD]  period is the window, in ns: a whole number of
--                     microseconds, at most floodgate.MaxWindow
--   ARGV[ARG_TAU]     is 0 (unused)
--   ARGV[ARG_AT]      admitted, for a settlement, is the instant the
--                     units were admitted for
--
-- Reply: {now's seconds, now's nanoseconds (0 to 1e9 - 1), allowed (0 or 1),
-- granted, from, at, before, after, last}:
--   from    max(now, the newest instant) before the step
--   at      take: the admission instant, also when denied; take up to n,
--           denied: when one unit fits; otherwise ""
--   before  the units in the window ending at from, before the step
--   after   the units in the log after the step
--   last    the newest instant after the step, "" for an empty log
-- The log is too large to return; redisstore builds the Result from these
-- facts with the formulas of step.SlidingLog. A dry step (a check) replies
-- the facts of the step it would take, and "after" and "last" as it would
-- leave the log. An admitted take sets delay (lib.lua).
--
-- Cost: O(log n) for a take and a take up to n, plus O(log n) for each
-- entry that has left the window and is dropped (each entry is dropped
-- once); a settlement also moves the score of every entry admitted after
-- the settled instant.
--
-- Writes: through lib.lua's write, so that a dry step records them. The
-- step reads its key after its own writes only in trim and after it (the
-- ranks of the entries, the base): a dry step keeps the entries it trimmed
-- in the key, as ranks 1 to skip, and reads past them, and every entry it
-- trimmed has a score at most the new base. One write happens even when
-- dry: moving the base back to 0 (see below), a new representation of the
-- same log.
--
-- Time: the client's clock when ARGV[ARG_NOW] is set, else Redis TIME. As in
-- step.SlidingLog, a denial drops the entries that have left the window,
-- which no decision can observe, and a check drops none; neither changes
-- anything else, not the TTL. The TTL is the time until the newest entry
-- leaves the window plus the margin.

local limit, w = quota, period

-- B is the base, C the newest score: the log holds C - B units. One
-- ZRANGE reads "b" and the 32 oldest entries (the first rows trim looks
-- at), and the whole log when it holds at most 32 entries.
local B, C = 0, 0
local last = nil -- the newest instant, as stored
local card = 0
local head = redis.call('ZRANGE', key, 0, 32, 'WITHSCORES')
if #head > 0 then
  if #head < 4 or head[1] ~= 'b' then
    error('floodgate: corrupt sliding log')
  end
  B = tonumber(head[2])
  if #head < 66 then
    card, last, C = #head / 2, head[#head - 1], tonumber(head[#head])
  else
    card = redis.call('ZCARD', key)
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    last, C = newest[1], tonumber(newest[2])
  end
end

-- Scores are exact up to 2^53 = 2 * MAX_QUOTA. A step writes scores of at
-- most C + 2 * limit (a take at most C + limit, a charge up to 2 * limit
-- units in the log); when that could pass 2^53, move the base back to 0
-- (once per about 2^53 - 2 * limit units admitted), after which the scores
-- are the units, at most 2 * limit.
if B > 0 and C > 2 * MAX_QUOTA - 2 * limit then
  head = nil
  local rows = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    redis.call('ZADD', key, int(tonumber(rows[i + 1]) - B), rows[i])
  end
  C, B = C - B, 0
end

-- from = max(now, newest): nothing is ever admitted before the newest entry.
local fs, fns, fo = ts, tns, 0
if last then
  local ls, lns = parse(last)
  local lo = sub(ls, lns, ts, tns)
  if lo > 0 then
    fs, fns, fo = ls, lns, lo
  end
end

-- trim drops the entries at or before the instant (ps, pns) minus the
-- window, oldest first, and the key with the last of them. Its first look
-- uses head's rows while the log is as read. Dry, the entries it drops stay
-- in the key as ranks 1 to skip.
local skip = 0
local function trim(ps, pns)
  while card > 1 do
    local rows, from = head, 3
    if not rows then
      rows, from = redis.call('ZRANGE', key, 1 + skip, 32 + skip, 'WITHSCORES'), 1
    end
    head = nil
    local k, nb = 0, nil
    for i = from, #rows, 2 do
      local es, ens = parse(rows[i])
      if sub(es, ens, ps, pns) > -w then
        break
      end
      k, nb = k + 1, rows[i + 1]
    end
    if k == card - 1 then
      write('DEL', key)
      card, B, C, last = 0, 0, 0, nil
      return
    end
    if k > 0 then
      write('ZREMRANGEBYRANK', key, 1, k)
      if dry then
        skip = skip + k
      end
      card = card - k
      B = tonumber(nb)
      write('ZADD', key, int(B), 'b')
    end
    if k < 32 then
      return
    end
  end
end

-- push appends k units at the instant (ps, pns), which is not before the
-- newest entry, merging with it when the instants are equal.
local function push(ps, pns, k)
  local member = fmt(ps, pns)
  if card == 0 then
    write('ZADD', key, '0', 'b')
    card = 1
  end
  if member ~= last then
    card = card + 1
  end
  C = C + k
  write('ZADD', key, int(C), member)
  last = member
end

-- expire sets the TTL: until the newest entry leaves the window.
local function expire()
  local ls, lns = parse(last)
  write('PEXPIRE', key, ttl(sub(ls, lns, ts, tns) + w, margin))
end

-- The entries that left the window ending at from go, as in
-- step.SlidingLog; a dry step (a check, every step of limits.lua) drops
-- none, as a check drops none there: it records their removal with its
-- writes, and leaves them in the key, where a step at a later instant
-- (limits.lua's second) still finds them in the window at now.
trim(fs, fns)
head = nil -- the log may have changed
local before = C - B
local allowed, granted, at = 0, 0, ''

-- admit returns the earliest instant, not before from, at which k more
-- units fit (k <= limit), as a pair and as an offset from now: once the
-- oldest entries holding the excess units have left the window.
local function admit(k)
  local as, ans, ao = fs, fns, fo
  local excess = before + k - limit
  if excess > 0 then
    local row = redis.call('ZRANGEBYSCORE', key, int(B + excess), '+inf', 'LIMIT', 0, 1)
    local es, ens = parse(row[1])
    local xs, xns = add(es, ens, w)
    local xo = sub(xs, xns, ts, tns)
    if xo > ao then
      as, ans, ao = xs, xns, xo
    end
  end
  return as, ans, ao
end

if op == OP_TAKE then
  local as, ans, ao = admit(n)
  at = fmt(as, ans)
  if ao <= maxd then
    allowed, granted = 1, n
    delay = ao
    if ao > fo then
      -- Admitted later than from: more entries may have left by then.
      trim(as, ans)
    end
    push(as, ans, n)
    expire()
  end
elseif op == OP_TAKE_UP_TO then
  local m = 0
  if fo <= 0 then
    m = math.min(n, limit - before)
  end
  if m > 0 then
    allowed, granted = 1, m
    push(ts, tns, m)
    expire()
  else
    at = fmt(admit(1))
  end
elseif last then -- OP_SETTLE
  -- On the entry admitted at the instant given, if the log holds it (an
  -- entry a dry step trimmed, still in the key, has a score of at most B).
  local member = fmt(parse(admitted))
  local score = tonumber(redis.call('ZSCORE', key, member))
  if score and score > B then
    local r = redis.call('ZRANK', key, member)
    local prev = redis.call('ZRANGE', key, r - 1, r - 1, 'WITHSCORES')
    local units = score - tonumber(prev[2])
    -- g units more in the entry: a charge of up to 2 * limit units in the
    -- log (compared as in step.SlidingLog), or a give-back (g < 0) of at
    -- most the units it holds.
    local g
    if n > 0 then
      g = math.min(n, math.max(limit - (before - limit), 0))
    else
      g = -math.min(-n, units)
    end
    if g ~= 0 then
      -- Every entry from this one on holds g more units up to it.
      local rows = redis.call('ZRANGE', key, r, -1, 'WITHSCORES')
      for i = 1, #rows, 2 do
        write('ZADD', key, int(tonumber(rows[i + 1]) + g), rows[i])
      end
      if g == -units then
        write('ZREM', key, member)
        card = card - 1
        if member == last then
          last = prev[1]
        end
      end
      C = C + g
      allowed, granted = 1, math.abs(g)
      if C == B then
        write('DEL', key)
        last = nil
      else
        expire()
      end
    end
  end
end

return {ts, tns, allowed, granted, fmt(fs, fns), at, before, C - B, last or ''}
