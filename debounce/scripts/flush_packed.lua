-- Add the events a producer answered locally (local.go) to their packed
-- rounds (debounce and dedup rounds, throttle windows), each only if its key
-- still holds the round they joined: the same expiry and random bits, the
-- two halves of its token. A round taken, cancelled, expired or replaced
-- gets nothing, and the producer submits those events again.
--
-- KEYS[i] -> the i-th round key (or throttle window key), for i up to #KEYS-1
-- KEYS[#KEYS] -> this flush's marker (the first round's hash tag): it keeps
--            the reply until a minute after the last of the rounds it
--            applied to expires (a minute when it applied to none), so
--            that a flush sent again because its reply was lost gets the
--            same reply and applies nothing twice, however late it is sent
--            again: no round can take it after its expiry. The next flush
--            deletes it.
-- ARGV: four per key, those of KEYS[i] at 4i-3 to 4i: the round's expiry
--       (unix ms), its random bits, the events to add, and the latest of
--       them in ms after the round's base (its expiry minus its lifetime)
-- Returns, per key, the round's count after the flush, or -1 when the key
-- does not hold the round any more (missing, another token, another type).

local args = ARGV
local CNT, MAXCNT, RND = 65536, 4194303, 549755813888 -- 2^16, 22 bits, 2^39

-- seen encodes ms >= 0 as a 16-bit float (scripts/seen.lua, put here by
-- scripts.go; layout.go, encodeSeen).
--SEEN--

local marker = KEYS[#KEYS]
local done = redis.call('GET', marker)
if done then return cjson.decode(done) end

local MARKER_MARGIN = 60000 -- ms the marker outlives the last round it applied to
local out = {}
local last_expiry = 0
for i = 1, #KEYS - 1 do
  local key = KEYS[i]
  local j = 4 * i - 3
  local expiry, rnd = tonumber(args[j]), tonumber(args[j + 1])
  local n, offset = tonumber(args[j + 2]), tonumber(args[j + 3])
  local raw = redis.pcall('GET', key)
  local v = type(raw) == 'string' and tonumber(raw)
  if not v or math.floor(v / RND) ~= rnd or redis.call('PEXPIRETIME', key) ~= expiry then
    out[i] = -1
  else
    local count = math.floor(v / CNT) % 4194304
    local add = math.min(n, MAXCNT - count)
    local delta = add * CNT
    local s, old = seen(offset), v % CNT
    if s > old then delta = delta + (s - old) end
    if delta ~= 0 then redis.call('INCRBY', key, delta) end
    out[i] = count + add
    if expiry > last_expiry then last_expiry = expiry end
  end
end
if last_expiry > 0 then
  redis.call('SET', marker, cjson.encode(out), 'PXAT', last_expiry + MARKER_MARGIN)
else
  redis.call('SET', marker, cjson.encode(out), 'PX', MARKER_MARGIN)
end
return out
