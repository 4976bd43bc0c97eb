-- Open a round in the hash layout, or join the one pending: debounce with
-- extend or with payload last/accumulate, and throttle's trailing round with
-- those payloads (KEYS[2] is then the window key, as in open_packed.lua).
-- Hash fields: t token, n count, f first seen, l last seen, d due (unix ms),
-- p published (0/1), v version of the published schedule, a last args,
-- m distinct items, one field "i" .. item per accumulated item, z 1 when
-- a round with payload last has a payload key (lastkey.go), 0 when not
-- (absent: opened before issue 25's third pass; it may have one), and the
-- round's identity, set at opening, from which the reaper can publish the
-- job again if the stream loses it (identity.go): k the round key (32 bytes)
-- then the job type, g the fingerprint (32 bytes) when it differs from the
-- key, o the opening event's args (not with payload last: a is the args).
-- Each is short enough for the hash to stay a listpack. A round held in
-- Redis until due (deferred.go) also has q 1 (it is in its type's due list,
-- published by a forwarder), tp its opening event's traceparent and x its
-- exclusive key's lease in ms, if any.
--
-- KEYS[1] -> round key (hash)
-- KEYS[2] -> throttle window key (only for throttle with trailing), or, for
--            debounce, the type's due list (deferred.go)
-- ARGV[1] -> token for a new round (decimal)
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> expiry of a new round, unix ms (trailing: window end + ARGV[15])
-- ARGV[4] -> due time of a new round, unix ms (trailing: window end)
-- ARGV[5] -> extend: window ms, "0" when not extending
-- ARGV[6] -> extend: max wait ms from the first event
-- ARGV[7] -> payload: "first", "last" or "accumulate"; "last+": last, and
--            a round opened gets a payload key (lastkey.go): its token's
--            key beside the round, holding its latest args, which a
--            producer that knows the round writes with one SET XX
-- ARGV[8] -> the event's args (last) or item (accumulate); "" for first
-- ARGV[9] -> max items (accumulate)
-- ARGV[10] -> identity: field k (round key bytes, then the job type)
-- ARGV[11] -> identity: field g, "" when the fingerprint is the key
-- ARGV[12] -> identity: field o, "" with payload last (unless deferred)
-- ARGV[13] -> throttle: value to open the window with (packed layout);
--             debounce: "due" to open a new round deferred (in the due
--             list, published by a forwarder when due); "list" to open it
--             with a JetStream schedule while a round held earlier that
--             this event fills goes to now in the due list (KEYS[2])
-- ARGV[14] -> throttle: window length, ms (timed here, from the moment the
--             window opens); deferred: the opening event's traceparent
-- ARGV[15] -> throttle: how long the trailing round outlives its window, ms;
--             deferred: an exclusive key's lease, ms ("0": not exclusive)
-- Returns 'status token count first due published fire version': the
--   eight numbers in one string, separated by spaces (join_tail.lua)
--   status OPENED, JOINED, EXTENDED (joined and pushed the due time later);
--   for throttle LEADING (window opened; THROTTLED is unused here: trailing
--   always gathers); for LEADING the reply is {LEADING, window value,
--   window expiry}.
--   fire 1: this event filled the round to max items; due is now and the
--   version was incremented: publish the schedule again with it. A deferred
--   round is filled by moving it to now in the due list instead (fire 0,
--   due now): the forwarder publishes it.

-- Statuses: one code per meaning in both scripts that open rounds (Go: the
-- status* constants in submit.go; TestScriptStatuses checks them).
local JOINED, OPENED, LEADING, THROTTLED, EXTENDED = 0, 1, 2, 3, 4

local CNT, MAXCNT = 65536, 4194303
local key = KEYS[1]
local token, now_arg = ARGV[1], ARGV[2]
local now = tonumber(now_arg)
local expiry, due = tonumber(ARGV[3]), tonumber(ARGV[4])
local extend_ms, max_wait_ms = tonumber(ARGV[5]), tonumber(ARGV[6])
local payload, data, max_items = ARGV[7], ARGV[8], tonumber(ARGV[9])
local id_key, id_fingerprint, id_args = ARGV[10], ARGV[11], ARGV[12]
local window_value, window_ms, trailing_ms = ARGV[13], ARGV[14], ARGV[15]
local deferred = window_value == 'due'
local trace, lease = ARGV[14], ARGV[15]
local payload_key = payload == 'last+'
if payload_key then payload = 'last' end
local throttle = KEYS[2] ~= nil and not deferred and window_value ~= 'list'
local due_list = nil
if KEYS[2] and not throttle then due_list = KEYS[2] end

-- A window whose trailing round (KEYS[1]) is still pending stays closed
-- until that round's job starts (open_packed.lua): the event joins it.
if throttle and redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', key) == 0 then
  redis.call('SET', KEYS[2], window_value, 'PX', window_ms)
  return {LEADING, tonumber(window_value), redis.call('PEXPIRETIME', KEYS[2])}
end
if throttle and redis.call('EXISTS', KEYS[2]) == 1 then
  -- Count the event in the window value, as open_packed.lua does: the
  -- count and the latest event's time after the window's start
  -- (scripts/seen.lua, put here by scripts.go).
--SEEN--
  local wexp = redis.call('PEXPIRETIME', KEYS[2])
  packed_join(KEYS[2], redis.call('GET', KEYS[2]), wexp, tonumber(window_ms), now)
  due = wexp
  expiry = wexp + tonumber(trailing_ms)
end

-- One HMGET tells a new key (no token) from a round to join, and gives
-- what the reply needs.
-- The fields the join reads (scripts/join_fields.lua): f.
--FIELDS--
if not f[1] then
  local published, fire = 0, 0
  if deferred then published = 1 end
  -- Constants and now_arg as strings: a number handed to redis.call is
  -- formatted with printf (join_tail.lua).
  local h = {'t', token, 'n', '1', 'f', now_arg, 'l', now_arg, 'd', due, 'p', published == 1 and '1' or '0', 'v', '0', 'k', id_key}
  if id_fingerprint ~= '' then h[#h + 1], h[#h + 2] = 'g', id_fingerprint end
  if id_args ~= '' then h[#h + 1], h[#h + 2] = 'o', id_args end
  if payload == 'last' then
    -- z: whether the round has a payload key (join_tail.lua)
    h[#h + 1], h[#h + 2], h[#h + 3], h[#h + 4] = 'a', data, 'z', '0'
    if payload_key then h[#h] = '1' end
  end
  -- The opening event's item is the first: m 1.
  if payload == 'accumulate' then h[#h + 1], h[#h + 2], h[#h + 3], h[#h + 4] = 'm', '1', 'i' .. data, '1' end
  if deferred then
    h[#h + 1], h[#h + 2] = 'q', '1'
    if trace ~= '' then h[#h + 1], h[#h + 2] = 'tp', trace end
    if lease ~= '0' then h[#h + 1], h[#h + 2] = 'x', lease end
  end
  redis.call('HSET', key, unpack(h))
  if payload_key then
    -- Same slot as the round (its key with a suffix): take_round.lua
    -- reads and deletes it with the round.
    redis.call('SET', key .. 'a' .. token, data, 'PXAT', expiry)
  end
  if payload == 'accumulate' and max_items <= 1 then
    fire = 1
    due = now
    redis.call('HSET', key, 'd', due)
  end
  if deferred then
    -- Held here until due: the forwarder publishes its job (a filled one
    -- at once: its due time is now).
    redis.call('ZADD', due_list, due, key)
    fire = 0
  end
  redis.call('PEXPIREAT', key, expiry)
  -- One string, as a join's reply (join_tail.lua): an array of eight
  -- costs the reader about five allocations more (issue 25, sixth pass).
  -- now and due are whole ms below 10^14: '..' writes them with %.14g,
  -- in full.
  return OPENED .. ' ' .. token .. ' 1 ' .. now_arg .. ' ' .. due .. ' ' .. published .. ' ' .. fire .. ' 0'
end

-- The join (scripts/join_tail.lua, appended to this script by scripts.go).
