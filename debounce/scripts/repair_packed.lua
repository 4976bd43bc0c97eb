-- Take a version for publishing again the job of a packed round whose
-- message the stream lost, if the round is still the one the reaper found
-- overdue and no other reaper repaired it since (the repair count is the
-- same). The version is the repair count, so every repair has its own
-- message id. A stale identity (the round closed or replaced) is deleted.
--
-- KEYS[1] -> round key
-- KEYS[2] -> identity key (note_overdue.lua)
-- ARGV[1] -> the round's expiry, unix ms
-- ARGV[2] -> the round's random bits
-- ARGV[3] -> the repair count (field r) the reaper saw
-- ARGV[4] -> the identity (field j) the reaper read: a stale identity is
--            deleted only if it is still that one (a round of the same key
--            opened since, held in Redis until due, wrote its own, which its
--            forwarder needs)
-- Returns {1, version} publish with this version; {0} repaired meanwhile;
--         {-1} the round is gone or another one (identity deleted)

local expiry = ARGV[1]
local rnd = ARGV[2]
local seen_repairs = ARGV[3]
local read_identity = ARGV[4]
local RND = 549755813888 -- 2^39
local raw = redis.call('GET', KEYS[1])
if not raw or redis.call('PEXPIRETIME', KEYS[1]) ~= tonumber(expiry)
    or math.floor(tonumber(raw) / RND) ~= tonumber(rnd) then
  if redis.call('HGET', KEYS[2], 'j') == read_identity then redis.call('DEL', KEYS[2]) end
  return {-1}
end
if redis.call('HGET', KEYS[2], 'r') ~= seen_repairs then return {0} end
return {1, redis.call('HINCRBY', KEYS[2], 'r', 1)}
