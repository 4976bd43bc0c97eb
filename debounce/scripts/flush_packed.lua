-- Add the events a producer answered locally (local.go) to their packed
-- rounds (debounce and dedup rounds, throttle windows), each only if its key
-- still holds the round they joined: the same expiry and random bits, the
-- two halves of its token. A round taken, cancelled, expired or replaced
-- gets nothing, and the producer submits those events again.
--
-- KEYS[i] -> the i-th round key (or throttle window key), for i up to #KEYS-1
-- KEYS[#KEYS] -> this flush's marker (the first round's hash tag): it keeps
--            the reply for 30 s (the next flush deletes it), so that a flush sent again because its
--            reply was lost gets the same reply and applies nothing twice
-- ARGV: four per key, those of KEYS[i] at 4i-3 to 4i: the round's expiry
--       (unix ms), its random bits, the events to add, and the latest of
--       them in ms after the round's base (its expiry minus its lifetime)
-- Returns, per key, the round's count after the flush, or -1 when the key
-- does not hold the round any more (missing, another token, another type).

local args = ARGV
local CNT, MAXCNT, RND = 65536, 4194303, 549755813888 -- 2^16, 22 bits, 2^39

-- seen encodes ms >= 0 as a 16-bit float (open_packed.lua, layout.go).
local function seen(ms)
  if ms < 2048 then
    if ms < 0 then return 0 end
    return math.floor(ms)
  end
  local e = 1
  while ms >= 4096 do
    ms = math.floor(ms / 2)
    e = e + 1
  end
  if e > 31 then return 65535 end
  return e * 2048 + math.floor(ms) - 2048
end

local marker = KEYS[#KEYS]
local done = redis.call('GET', marker)
if done then return cjson.decode(done) end

local out = {}
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
  end
end
redis.call('SET', marker, cjson.encode(out), 'PX', 30000)
return out
