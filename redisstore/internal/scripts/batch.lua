-- batch.lua: the decisions of one batch, on one algorithm, as one atomic
-- script. Source's batch script is time.lua, the algorithm's fast path (if
-- it has one), lib.lua, args.lua and the algorithm's file as the function
-- one(KEYS, ARGV), and this file; each decision is the single script's, in
-- the order given.
--
-- KEYS[i]  the key of decision i
-- ARGV     the number of argument lists m; then each list (the single
--          script's ARGV, scripts.Args.ARGV), as its length followed by its
--          elements; then, for each decision in turn, the number (1 to m)
--          of its list. Decisions of one limiter mostly share one list,
--          which is sent and converted once. redisstore's batchArgs builds
--          it.
--
-- Reply: an array holding each decision's reply, as the single script
-- would give it; an error reply in place of a decision that raised one,
-- whose writes before the error stand, as they do in a single script.
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
local out = {}
for i = 1, #KEYS do
  local argv = lists[ARGV[a] + 0]
  a = a + 1
  local ok, r = true, nil
  if fast and serverTime and argv[ARG_OP] == OP_TAKE and (argv[ARG_NOW] or '') == '' then
    ok, r = pcall(fast, KEYS[i], argv, serverTime)
  end
  if ok and not r then
    ok, r = pcall(one, {KEYS[i]}, argv)
  end
  if not ok and not (type(r) == 'table' and r.err) then
    -- A Lua error raised as a string, not one of redis.call's.
    r = {err = tostring(r)}
  end
  out[i] = r
end
return out
