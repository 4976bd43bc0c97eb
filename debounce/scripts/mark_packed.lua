-- Mark a packed round published, if it is still the caller's. Events that
-- join a round not yet marked publish it themselves (idempotently), so an
-- accepted event never waits on a publish that may never happen.
--
-- KEYS[1] -> round key
-- ARGV[1] -> the round's expiry, unix ms
-- ARGV[2] -> the round's random bits
-- Returns 1 marked (or already marked), 0 missing, -1 stale token

local expiry = ARGV[1]
local rnd = ARGV[2]
local RND, PUB = 549755813888, 274877906944 -- 2^39, 2^38
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local v = tonumber(raw)
if redis.call('PEXPIRETIME', KEYS[1]) ~= tonumber(expiry) or math.floor(v / RND) ~= tonumber(rnd) then
  return -1
end
if math.floor(v / PUB) % 2 == 0 then redis.call('INCRBY', KEYS[1], PUB) end
return 1
