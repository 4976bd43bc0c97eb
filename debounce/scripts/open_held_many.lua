-- Open several packed debounce rounds of one type held in Redis until due
-- (deferred.go), or join those pending: what open_packed.lua does for one
-- held event, for the held openings that meet in one pipeline (batch.go,
-- merge.go). One script call for many events costs Redis less than a
-- call each: measured (issue 25, third pass; redis-benchmark, random keys,
-- 300-byte identities) 12.7 µs of Redis CPU per opening one call each, 9.7-
-- 10.0 µs eight to a call. Each event is decided as open_packed.lua decides
-- it, in order; an event whose key holds another kind of value (a hash
-- round after a policy change) gets its error and the others go on.
--
-- KEYS[1] -> the type's due list
-- KEYS[2] -> the type's identity hash (open_packed.lua)
-- KEYS[i] -> for i from 3: the round key of the (i-2)-th event
-- ARGV: six per event, those of the k-th at 6k-5 to 6k, as open_packed.lua's
--       first six for a held round: the value to open the round with, its
--       expiry (unix ms), now (unix ms), the round's lifetime (ms), its due
--       time (unix ms: its score in the due list) and its identity
-- Returns one reply per event, in order: OPENED (a bare integer: the round
-- opened with the value and expiry sent), {JOINED, value, expiry} (the
-- pending round joined), or the error of its SET.
--
-- The openings' listings go out as one ZADD and one HSET at the end, not
-- two commands per opening: measured under callgrind (issue 25, fifth
-- pass; scripts/join-cost.sh held: eight new keys to a call, 330-byte
-- identities), 48.8k -> 38.0k instructions per opening. Nothing in the call reads the due list or the
-- identity hash, and the script is atomic, so no one sees the order.

-- Statuses: open_packed.lua's (Go: the status* constants in submit.go).
local JOINED, OPENED, LEADING, THROTTLED, EXTENDED = 0, 1, 2, 3, 4

local args = ARGV
local CNT = 65536      -- 2^16
local MAXCNT = 4194303 -- 22 bits
local due_list, ids = KEYS[1], KEYS[2]

-- seen encodes ms >= 0 as a 16-bit float (scripts/seen.lua, put here by
-- scripts.go; layout.go, encodeSeen).
--SEEN--

local out, listed, named = {}, {}, {}
for i = 1, #KEYS - 2 do
  local key, j = KEYS[i + 2], 6 * i - 5
  local open_value, expiry = args[j], args[j + 1]
  -- SET NX GET opens the round or reads the pending one (open_packed.lua).
  local raw = redis.pcall('SET', key, open_value, 'NX', 'GET', 'PXAT', expiry)
  if type(raw) == 'table' and raw.err then
    out[i] = raw
  elseif not raw then
    -- Opened published, and listed for the forwarder with its identity
    -- (open_packed.lua says why ZADD and HSET, not their NX forms), by
    -- the ZADD and HSET after the loop. Its seen is 0: the expiry is at
    -- least now plus the lifetime.
    listed[#listed + 1], listed[#listed + 2] = args[j + 4], key
    named[#named + 1], named[#named + 2] = key, args[j + 5]
    out[i] = OPENED
  elseif not tonumber(raw) then
    -- Not a packed round (open_packed.lua would fail on it): this event's
    -- error, the others go on.
    out[i] = redis.error_reply('ERR the key holds no packed round')
  else
    -- Join, as open_packed.lua's (seen.lua's packed_join).
    local exp = redis.call('PEXPIRETIME', key)
    out[i] = {JOINED, packed_join(key, raw, exp, tonumber(args[j + 3]), tonumber(args[j + 2])), exp}
  end
end
if #listed > 0 then
  redis.call('ZADD', due_list, unpack(listed))
  redis.call('HSET', ids, unpack(named))
end
return out
