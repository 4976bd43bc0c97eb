-- Take an exclusive key's lease for one delivery of a job, or count that
-- delivery's wait (exclusive.go): at most one job of a key runs at a time.
--
-- KEYS[1] -> the key's lease (the round key's tag and "e"): the owner
-- KEYS[2] -> the job's waits (the tag, "ew" and its identity: its token or
--            bypass, and "~" and its run for a replay): a hash of n,
--            the deliveries that found the key busy, and since, when the
--            first did (unix ms)
-- ARGV[1] -> the owner: one delivery's random id
-- ARGV[2] -> the lease, ms
-- ARGV[3] -> how long the waits are kept, ms
-- ARGV[4] -> now, unix ms
-- Returns:
--   {TAKEN, n, since}   taken (or held already by this owner), with the
--                       job's waits so far (0, 0 without)
--   {BUSY, left}        another owner holds it for left ms more (without a
--                       refresh); this delivery's wait is counted
local owner = ARGV[1]
local lease_ms = ARGV[2]
local keep_ms = ARGV[3]
local now = ARGV[4]
local BUSY, TAKEN = 0, 1

local holder = redis.call('GET', KEYS[1])
if not holder or holder == owner then
  redis.call('SET', KEYS[1], owner, 'PX', lease_ms)
  local w = redis.call('HMGET', KEYS[2], 'n', 'since')
  return {TAKEN, tonumber(w[1] or 0), tonumber(w[2] or 0)}
end
if redis.call('HINCRBY', KEYS[2], 'n', 1) == 1 then
  redis.call('HSET', KEYS[2], 'since', now)
end
redis.call('PEXPIRE', KEYS[2], keep_ms)
return {BUSY, redis.call('PTTL', KEYS[1])}
