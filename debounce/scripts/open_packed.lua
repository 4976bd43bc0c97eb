-- Open a round in the packed layout (SET key value PXAT expiry when the key
-- is absent), or join the one pending: dedup,
-- debounce with payload first, and (with KEYS[2]) throttle. The value is an
-- integer below 2^53 so Lua numbers hold it exactly (layout.go):
--   rnd * 2^39 + published * 2^38 + count * 2^16 + seen
-- where seen is the latest event's time after the round's base (its expiry
-- minus its lifetime, ARGV[4]) in ms, as a 16-bit float (layout.go,
-- encodeSeen): the greatest over the events, so the latest event.
--
-- KEYS[1] -> round key
-- KEYS[2] -> throttle window key (only for throttle; shares KEYS[1]'s hash tag),
--            or, with three keys, the type's due list (deferred.go)
-- KEYS[3] -> with a due list: the type's identity hash (deferred.go,
--            idsKey), where the round's identity waits under its round key
--            until the forwarder's first take moves it to the round's
--            identity key (forward_take.lua)
-- ARGV[1] -> value to open the round with (count 1, not published, seen 0)
-- ARGV[2] -> round expiry, unix ms (ignored for a trailing round: window end + ARGV[8])
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> the round's lifetime, ms: its base is its expiry minus this
-- ARGV[5] -> throttle: value to open the window with
-- ARGV[6] -> throttle: window length, ms (timed here, from the moment the
--            window opens, so a delayed request opens a whole window); it
--            is also the window's lifetime
-- ARGV[7] -> throttle: "1" to gather dropped events into a trailing round
-- ARGV[8] -> throttle: how long a trailing round outlives its window, ms
-- With a due list (a debounce round held in Redis until due, deferred.go),
-- ARGV[5] and ARGV[6] are instead:
-- ARGV[5] -> the round's due time, unix ms: its score in the due list
-- ARGV[6] -> the round's identity (identity.go, JSON), kept in KEYS[3] for
--            the forwarder that publishes its job
-- Returns {status, value, expiry}:
--   status OPENED: opened KEYS[1]; JOINED: joined KEYS[1];
--          LEADING: leading edge, opened the window (value/expiry of KEYS[2]);
--          THROTTLED: dropped (value/expiry of KEYS[2])
--   value: the key's value after this event; expiry: its PEXPIRETIME
-- or, for a round opened without a throttle window, OPENED alone (a bare
-- integer): its value is ARGV[1] and its expiry ARGV[2] (openPacked in
-- submit.go, and idempotent.lua, which records it as the table).

-- Statuses: one code per meaning in both scripts that open rounds (Go: the
-- status* constants in submit.go; TestScriptStatuses checks them).
local JOINED, OPENED, LEADING, THROTTLED, EXTENDED = 0, 1, 2, 3, 4

local CNT = 65536      -- 2^16
local MAXCNT = 4194303 -- 22 bits
local open_value, expiry_arg, now_arg, lifetime_arg = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local window_value, window_ms, trailing, trailing_ms = ARGV[5], ARGV[6], ARGV[7] == '1', ARGV[8]
local due_ms, identity = ARGV[5], ARGV[6] -- with a due list, instead

-- The opening comes first, before the functions below are made: a script
-- call runs its whole chunk, and each function defined is a closure made
-- at every call. Measured (redis-benchmark, 200,000 held openings, Redis
-- 7.0.15): 9.8 µs of Redis per opening with the opening below the
-- functions and a table reply, 8.6 µs above them, 7.7 µs with the bare
-- reply (issue 25, third pass). SET NX GET opens the round or reads the
-- pending one in one command. An opening's seen is 0: ARGV[2] is at least
-- ARGV[3] + ARGV[4] (Go: now plus the lifetime, in ms), so the event is at
-- or before the round's base.
local raw
if #KEYS ~= 2 then
  raw = redis.call('SET', KEYS[1], open_value, 'NX', 'GET', 'PXAT', expiry_arg)
  if not raw then
    if #KEYS == 3 then
      -- Held in Redis until due (deferred.go): the forwarder publishes
      -- its job when due; the caller opened it published (joiners have
      -- nothing to publish). ZADD without NX: a listing of an earlier
      -- round of the key still there (claimed by a forwarder not done
      -- with it) takes this round's due time, and its claim's settling
      -- leaves it (forward_done.lua); HSET, not HSETNX: an earlier
      -- round's identity never forwarded (cancelled, expired) is replaced.
      -- The identity as a field of the type's hash rather than a key of
      -- its own with a TTL: ~5 µs of Redis less per opening (issue 25).
      redis.call('ZADD', KEYS[2], due_ms, KEYS[1])
      redis.call('HSET', KEYS[3], KEYS[1], identity)
    end
    return OPENED
  end
end

-- Joins and throttle windows make their numbers only now: each tonumber
-- is a strtod, ~1.5k instructions an opening does not need (callgrind,
-- issue 25, fourth pass: a lone held opening 58.8k -> 53.5k).
local now, lifetime = tonumber(now_arg), tonumber(lifetime_arg)
local expiry = tonumber(expiry_arg) -- reassigned for a trailing round

-- seen encodes ms >= 0 as a 16-bit float, packed_join adds an event to a
-- packed value (scripts/seen.lua, put here by scripts.go; layout.go).
--SEEN--

-- open sets a new key to its opening value and the opening event's seen
-- (not 0 for a trailing round: its base is its window's start). The value
-- goes to SET as the caller's string: Lua would format a number > 2^47
-- with 14 significant digits.
local function open(key, value, expiry, life)
  redis.call('SET', key, value, 'PXAT', expiry)
  local s = seen(now - (expiry - life))
  if s > 0 then redis.call('INCRBY', key, s) end
  return tonumber(value) + s
end

-- A throttle: its window first. Inside a script nothing interleaves, so
-- GET then SET is as atomic as SET NX.
if #KEYS == 2 then
  local wraw = redis.call('GET', KEYS[2])
  local window = tonumber(window_ms)
  if not wraw then
    -- A window whose trailing round is still pending stays closed until
    -- that round's job starts (its take opens the next window): its key
    -- expired at the round's due time, but the job starts later (NATS
    -- fires a schedule up to ~0.5 s late, workers may be busy or away).
    -- The event joins the trailing round below; it never runs a leading
    -- job just before the trailing one.
    if not (trailing and redis.call('EXISTS', KEYS[1]) == 1) then
      redis.call('SET', KEYS[2], window_value, 'PX', window_ms)
      return {LEADING, tonumber(window_value), redis.call('PEXPIRETIME', KEYS[2])}
    end
  else
    local wexp = redis.call('PEXPIRETIME', KEYS[2])
    if not trailing then
      return {THROTTLED, packed_join(KEYS[2], wraw, wexp, window, now), wexp}
    end
    packed_join(KEYS[2], wraw, wexp, window, now)
    expiry = wexp + tonumber(trailing_ms)
  end
end

if #KEYS == 2 then
  raw = redis.call('GET', KEYS[1])
  if not raw then
    return {OPENED, open(KEYS[1], open_value, expiry, lifetime), expiry}
  end
end
local exp = redis.call('PEXPIRETIME', KEYS[1])
return {JOINED, packed_join(KEYS[1], raw, exp, lifetime, now), exp}
