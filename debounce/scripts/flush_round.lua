-- Add the events a producer answered locally (local.go) to their hash-layout
-- rounds (debounce with extend and payload first), each only if its key
-- still holds the round they joined (field t is its token): the count, the
-- latest event and, extending, the later due time the events push it to,
-- capped at max wait. A round taken, cancelled, expired or replaced gets
-- nothing, and the producer submits those events again.
--
-- KEYS[i] -> the i-th round key (hash), for i up to #KEYS-1
-- KEYS[#KEYS] -> this flush's marker (the first round's hash tag): it keeps
--            the reply until a minute after the last of the rounds it
--            applied to expires (a minute when it applied to none), so
--            that a flush sent again because its reply was lost gets the
--            same reply and applies nothing twice, however late it is sent
--            again: no round can take it after its expiry. The next flush
--            deletes it.
-- ARGV: five per key, those of KEYS[i] at 5i-4 to 5i: the round's token
--       (decimal), the events to add, the latest of them (unix ms), the
--       extend window in ms ("0": not extending), the max wait in ms
-- Returns two numbers per key: the round's count and due time (unix ms)
-- after the flush, or -1 and 0 when the key does not hold the round any
-- more.

local args = ARGV

local marker = KEYS[#KEYS]
local done = redis.call('GET', marker)
if done then return cjson.decode(done) end

local MARKER_MARGIN = 60000 -- ms the marker outlives the last round it applied to
local out = {}
local last_expiry = 0
for i = 1, #KEYS - 1 do
  local key = KEYS[i]
  local j = 5 * i - 4
  local token, n, last = args[j], tonumber(args[j + 1]), tonumber(args[j + 2])
  local extend_ms, max_wait_ms = tonumber(args[j + 3]), tonumber(args[j + 4])
  local f = redis.pcall('HMGET', key, 't', 'f', 'd', 'l')
  if f.err or f[1] ~= token then
    out[2 * i - 1], out[2 * i] = -1, 0
  else
    local first, d = tonumber(f[2]), tonumber(f[3])
    local count = redis.call('HINCRBY', key, 'n', n)
    if last > tonumber(f[4]) then redis.call('HSET', key, 'l', last) end
    if extend_ms > 0 then
      local nd = math.min(last + extend_ms, first + max_wait_ms)
      if nd > d then
        d = nd
        redis.call('HSET', key, 'd', d)
      end
    end
    out[2 * i - 1], out[2 * i] = count, d
    local expiry = redis.call('PEXPIRETIME', key)
    if expiry > last_expiry then last_expiry = expiry end
  end
end
if last_expiry > 0 then
  redis.call('SET', marker, cjson.encode(out), 'PXAT', last_expiry + MARKER_MARGIN)
else
  redis.call('SET', marker, cjson.encode(out), 'PX', MARKER_MARGIN)
end
return out
