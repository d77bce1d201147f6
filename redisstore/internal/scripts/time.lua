-- time.lua: the first lines of every script. It reads the Redis server's
-- TIME once per call, for every decision of the call that is on the
-- server's clock: a batch's decisions all happen at that instant.
--
-- KEYS     none
-- ARGV     none
-- Reply:   none; it defines serverTime, TIME's reply {seconds,
--          microseconds}, or nil when the server's clock reads MAX_UNIX
--          seconds or later, past which the scripts' window arithmetic is
--          not exact (lib.lua's clock raises the error for a decision that
--          needs the server's clock).
-- Time:    the Redis server's TIME, read also when the decisions bring the
--          client's clock (Options.Now, which tests use) and leave it
--          unused: there it costs about 1 µs of a decision's 10 (server
--          CPU per EVALSHA under redis-benchmark), the price of reading
--          TIME in one place.

-- Redis before 5 replicates scripts verbatim unless told to replicate
-- their effects, and refuses writes after TIME; later versions always
-- replicate effects, and 7 keeps the function as a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end
local serverTime = redis.call('TIME')
if serverTime[1] + 0 >= MAX_UNIX then
  serverTime = nil
end
