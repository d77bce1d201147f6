-- fixedwindow_fast.lua: the common case of fixedwindow.lua, run before
-- lib.lua's definitions (each costs a closure per call) and written out
-- without its helpers: a take on Redis TIME, on a missing key or a state
-- whose start has 19 digits (2001 to 2286, as every start a take on Redis
-- TIME writes until 2255). Anything else falls through to fixedwindow.lua.
-- Both make the decision of floodgate.FixedWindow.Step with the same exact
-- (seconds, nanoseconds) arithmetic (see lib.lua), and write the same state
-- and TTL; redisstore checks every reply against the Step.
--
-- fast(key, ARGV, t) returns the reply, or nil to fall through. t is the
-- TIME of a batch (batch.lua), or nil to ask Redis once the state parses.
local function fast(key, ARGV, t)
  if ARGV[1] == '0' and (ARGV[8] or '') == '' then
    local old = redis.call('GET', key)
    local ss, sns, cnt = 0, 0, 0
    if old then
      ss = nil
      -- "start:count", the start in 19 digits.
      if #old >= 21 and string.byte(old, 20) == 58 then
        ss, sns, cnt = tonumber(string.sub(old, 1, 10)), tonumber(string.sub(old, 11, 19)), tonumber(string.sub(old, 21))
        if not (ss and sns and cnt and ss % 1 == 0 and sns % 1 == 0 and cnt % 1 == 0 and ss >= 1e9 and sns >= 0 and cnt >= 0) then
          ss = nil
        end
      end
    end
    if ss then
      if not t then
        if redis.replicate_commands then
          redis.replicate_commands()
        end
        t = redis.call('TIME')
      end
      local ts, tns = t[1] + 0, t[2] * 1000
      if ts < 9000000000 then
        local n, limit, w = ARGV[2] + 0, ARGV[5] + 0, ARGV[6] + 0
        -- Offsets from now: the stored window's start, the current
        -- window's (in (-w, 0]; the instant is whole microseconds, and so
        -- are windows).
        local so = (ss - ts) * 1e9 + (sns - tns)
        local wo = -math.fmod(ts * 1000000 + t[2], w / 1000) * 1000
        local cs, cns, co, cc = ss, sns, so, cnt
        if so < wo then
          local x = tns + wo
          local r = math.fmod(x, 1e9)
          if r < 0 then
            r = r + 1e9
          end
          cs, cns, co, cc = ts + (x - r) / 1e9, r, wo, 0
        end
        -- Into the current window if it has room, else the next one.
        local xs, xns, xo, xc = cs, cns, co, cc + n
        if xc > limit then
          local x = cns + w
          local r = math.fmod(x, 1e9)
          xs, xns, xo, xc = cs + (x - r) / 1e9, r, co + w, n
        end
        local flags, new = ' 0 0', old or '0:0'
        if math.max(xo, 0) <= ARGV[3] + 0 then
          flags = ' 1 ' .. ARGV[2]
          new = string.format('%d%09d:%d', xs, xns, xc)
          -- The TTL: until the window ends, rounded up to a millisecond,
          -- plus the margin.
          local d = math.max(xo + w, 0)
          local r = math.fmod(d, 1e6)
          d = (d - r) / 1e6
          if r > 0 then
            d = d + 1
          end
          redis.call('SET', key, new, 'PX', string.format('%d', d + ARGV[4]))
        end
        -- The reply of fixedwindow.lua as one string (see scripts.go),
        -- joined from strings at hand: no number is formatted.
        return t[1] .. ' ' .. t[2] .. '000 ' .. (old or '0:0') .. ' ' .. new .. flags
      end
    end
  end
end
