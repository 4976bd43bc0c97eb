-- Open a round in the packed layout (SET key value PXAT expiry when the key
-- is absent), or join the one pending: dedup,
-- debounce with payload first, and (with KEYS[2]) throttle. The value is an
-- integer below 2^53 so Lua numbers hold it exactly (layout.go):
--   rnd * 2^39 + published * 2^38 + count * 2^16 + remaining
-- where remaining is the time from the latest event to the key's expiry, in
-- units of ARGV[4] ms (the least over the events, so the latest event).
--
-- KEYS[1] -> round key
-- KEYS[2] -> throttle window key (only for throttle; shares KEYS[1]'s hash tag)
-- ARGV[1] -> value to open the round with (count 1, not published)
-- ARGV[2] -> round expiry, unix ms (ignored for a trailing round: window end + ARGV[8])
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> unit of remaining, ms
-- ARGV[5] -> throttle: value to open the window with
-- ARGV[6] -> throttle: window length, ms (timed here, from the moment the
--            window opens, so a delayed request opens a whole window)
-- ARGV[7] -> throttle: "1" to gather dropped events into a trailing round
-- ARGV[8] -> throttle: grace after the window end for the trailing round, ms
-- Returns {status, value, expiry}:
--   status 1: opened KEYS[1]; 0: joined KEYS[1];
--          2: leading edge, opened the window (value/expiry of KEYS[2]);
--          3: throttled, dropped (value/expiry of KEYS[2])
--   value: the key's value after this event; expiry: its PEXPIRETIME

local RND, PUB, CNT = 549755813888, 274877906944, 65536 -- 2^39, 2^38, 2^16
local MAXCNT = 4194303                                   -- 22 bits
local now, unit = tonumber(ARGV[3]), tonumber(ARGV[4])

-- join adds one event to a packed value: count+1 (saturating) and the least
-- remaining time. INCRBY keeps the TTL and the integer encoding.
local function join(key, raw, expiry)
  local v = tonumber(raw)
  local delta = 0
  if math.floor(v / CNT) % 4194304 < MAXCNT then delta = CNT end
  local rem = math.floor((expiry - now) / unit)
  if rem < 0 then rem = 0 end
  local old = v % CNT
  if rem < old then delta = delta - (old - rem) end
  if delta ~= 0 then redis.call('INCRBY', key, delta) end
  return v + delta
end

-- Inside a script nothing interleaves, so GET then SET is as atomic as SET
-- NX, and the common case (the round exists: join it) costs no failed SET.
local expiry = tonumber(ARGV[2])
if KEYS[2] then
  local wraw = redis.call('GET', KEYS[2])
  if not wraw then
    redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
    return {2, tonumber(ARGV[5]), redis.call('PEXPIRETIME', KEYS[2])}
  end
  local wexp = redis.call('PEXPIRETIME', KEYS[2])
  if ARGV[7] ~= '1' then
    return {3, join(KEYS[2], wraw, wexp), wexp}
  end
  join(KEYS[2], wraw, wexp)
  expiry = wexp + tonumber(ARGV[8])
end

local raw = redis.call('GET', KEYS[1])
if not raw then
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', expiry)
  return {1, tonumber(ARGV[1]), expiry}
end
local exp = redis.call('PEXPIRETIME', KEYS[1])
return {0, join(KEYS[1], raw, exp), exp}
