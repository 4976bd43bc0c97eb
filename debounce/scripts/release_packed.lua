-- Close a packed round (release at start, dedup release at success, cancel)
-- if it is still the caller's: same expiry and same random bits, the two
-- halves of its token. A stale token changes nothing.
--
-- KEYS[1] -> round key
-- ARGV[1] -> the round's expiry, unix ms (token >> 14)
-- ARGV[2] -> the round's random bits (token & 0x3fff)
-- ARGV[3] -> "1": delete only if not yet published (a failed publish backing out)
-- Returns {status, value}:
--   1 released (value: the packed value, for the summary)
--   0 missing (expired, or already released)
--  -1 stale token: another round holds the key (value: its packed value)
--   2 kept: published meanwhile by a joiner (only with ARGV[3] = "1")

local RND, PUB = 549755813888, 274877906944 -- 2^39, 2^38
local raw = redis.call('GET', KEYS[1])
if not raw then return {0, 0} end
local v = tonumber(raw)
if redis.call('PEXPIRETIME', KEYS[1]) ~= tonumber(ARGV[1]) or math.floor(v / RND) ~= tonumber(ARGV[2]) then
  return {-1, v}
end
if ARGV[3] == '1' and math.floor(v / PUB) % 2 == 1 then
  return {2, v}
end
redis.call('DEL', KEYS[1])
return {1, v}
