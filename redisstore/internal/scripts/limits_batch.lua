-- limits_batch.lua: the decisions of one batch of floodgate.Limits, as one
-- atomic script. LimitsBatchSource's script is LimitsSource's parts with
-- limits.lua as the function oneLimits(KEYS, ARGV) and limits_fast.lua's
-- limitsFast taking them too, then this file; each decision is the single
-- Limits script's, in the order given.
--
-- KEYS     the keys of every decision, in turn: decision d's limits' keys
--          follow decision d-1's
-- ARGV     the number of argument lists m; then each list (the single
--          script's ARGV, scripts.Args.LimitsARGV), as its length followed
--          by its elements; then the number of decisions; then, for each
--          decision in turn, the number (1 to m) of its list and the
--          number of its keys. redisstore's limitsBatchArgs builds it.
--
-- Reply: an array holding each decision's reply, as the single Limits
-- script would give it; an error reply in place of a decision that raised
-- one, whose writes before the error stand, as they do in a single script.
--
-- Time: the one TIME time.lua read, for the decisions on Redis TIME; the
-- batch is one step, so they all happen at that instant.

-- The lists are shared between decisions: no script writes to its ARGV.
local lists, a = {}, 2
for l = 1, ARGV[1] + 0 do
  local c, list = ARGV[a] + 0, {}
  for j = 1, c do
    list[j] = ARGV[a + j]
  end
  lists[l] = list
  a = a + c + 1
end
local out, k = {}, 1
for d = 1, ARGV[a] + 0 do
  local argv, nk = lists[ARGV[a + 2 * d - 1] + 0], ARGV[a + 2 * d] + 0
  local keys = {}
  for j = 1, nk do
    keys[j] = KEYS[k]
    k = k + 1
  end
  local ok, r = true, nil
  if serverTime and argv[ARG_OP] == OP_TAKE and argv[ARG_NOW] == '' then
    ok, r = pcall(limitsFast, keys, argv, serverTime)
  end
  if ok and not r then
    ok, r = pcall(oneLimits, keys, argv)
  end
  if not ok and not (type(r) == 'table' and r.err) then
    -- A Lua error raised as a string, not one of redis.call's.
    r = {err = tostring(r)}
  end
  out[d] = r
end
return out
