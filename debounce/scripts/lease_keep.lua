-- Refresh or give up an exclusive key's lease, if this owner still holds it
-- (exclusive.go).
--
-- KEYS[1] -> the key's lease
-- ARGV[1] -> the owner
-- ARGV[2] -> "refresh" or "release"
-- ARGV[3] -> refresh: the lease, ms
-- Returns 1 done, 0 the owner does not hold it (it lapsed, or another took it)
local owner = ARGV[1]
local op = ARGV[2]
local lease_ms = ARGV[3]

if redis.call('GET', KEYS[1]) ~= owner then return 0 end
if op == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], lease_ms)
end
return 1
