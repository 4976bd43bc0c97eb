-- Keep, beside a packed round that an event found overdue (its due time
-- long past and not taken), the identity of its job (identity.go), so that
-- the reaper can publish the job again should the stream have lost it. A
-- packed round has no room for it; a hash round keeps it from its opening.
--
-- KEYS[1] -> round key
-- KEYS[2] -> identity key (the round key and "j"; a hash: j identity, r repairs)
-- ARGV[1] -> the round's expiry, unix ms (its token >> 14)
-- ARGV[2] -> the round's random bits (token & 0x3fff)
-- ARGV[3] -> the identity (JSON)
-- Returns 1 written, 0 already there, -1 the key holds another round (or none)

local expiry = tonumber(ARGV[1])
local rnd = tonumber(ARGV[2])
local identity = ARGV[3]
local RND = 549755813888 -- 2^39
local raw = redis.call('GET', KEYS[1])
if not raw then return -1 end
if redis.call('PEXPIRETIME', KEYS[1]) ~= expiry or math.floor(tonumber(raw) / RND) ~= rnd then
  return -1
end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'j', identity, 'r', 0)
redis.call('PEXPIREAT', KEYS[2], expiry)
return 1
