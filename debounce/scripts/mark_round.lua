-- Mark a hash-layout round published, if it is still the caller's.
--
-- KEYS[1] -> round key (hash)
-- ARGV[1] -> the round's token (decimal)
-- Returns 1 marked, 0 missing, -1 stale token

local token = ARGV[1]
local t = redis.call('HGET', KEYS[1], 't')
if not t then return 0 end
if t ~= token then return -1 end
redis.call('HSET', KEYS[1], 'p', 1)
return 1
