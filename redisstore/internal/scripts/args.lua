-- args.lua: the arguments of one decision, by name, for the algorithm's
-- file that Source puts after it (inside the batch script's function one,
-- once per decision). No other file of the general path reads ARGV.
--
-- KEYS[1]  the key's state, as the algorithm's file says
-- ARGV[ARG_OP]        op: OP_TAKE take, OP_TAKE_UP_TO take up to n,
--                     OP_SETTLE settle (a string, compared as one); a
--                     check-only step is its op's code plus CHECK_CODE:
--                     dry (lib.lua), set for each decision, says which
-- ARGV[ARG_N]         n, the units; for a settlement, the units charged
--                     (positive) or given back (negative)
-- ARGV[ARG_MAXDELAY]  maxd, the maximum delay of a take, in ns (at most
--                     floodgate.MaxDelay)
-- ARGV[ARG_MARGIN]    margin, the TTL margin, in ms
-- ARGV[ARG_QUOTA]     quota, the burst, capacity or limit (at most
--                     MAX_QUOTA)
-- ARGV[ARG_PERIOD]    period, the emission interval or the window, in ns;
--                     for a calendar window, its boundaries (a string)
-- ARGV[ARG_TAU]       tau, the time to restore the full quota, in ns, or 0
-- ARGV[ARG_NOW]       the instant (ts, tns): the client's clock in decimal
--                     ns since the Unix epoch; absent or "" for Redis TIME
-- ARGV[ARG_AT]        admitted, for a settlement the instant the units
--                     were admitted for, in decimal ns; else absent or ""
-- Reply:   none; the algorithm's file replies.
-- Time:    clock (lib.lua): ARGV[ARG_NOW] when set, else the TIME time.lua
--          read.

local key = KEYS[1]
local op, n, maxd, margin = ARGV[ARG_OP], ARGV[ARG_N] + 0, ARGV[ARG_MAXDELAY] + 0, ARGV[ARG_MARGIN] + 0
dry = op + 0 >= CHECK_CODE
if dry then
  op, pend = tostring(op - CHECK_CODE), {}
end
local quota, period, tau = ARGV[ARG_QUOTA] + 0, ARGV[ARG_PERIOD], ARGV[ARG_TAU] + 0
period = tonumber(period) or period
local ts, tns = clock(ARGV[ARG_NOW])
local admitted = ARGV[ARG_AT]
