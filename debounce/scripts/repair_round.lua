-- Take a version for publishing again the job of a hash-layout round whose
-- message the stream lost, if the round is still the one the reaper found
-- overdue: same token, published, same version (a worker that found it not
-- due, or another reaper, moves the version).
--
-- KEYS[1] -> round key (hash)
-- ARGV[1] -> the round's token (decimal)
-- ARGV[2] -> the version (field v) the reaper saw
-- Returns {1, version} publish with this version; {0} changed meanwhile;
--         {-1} the round is gone or another one

local token = ARGV[1]
local seen_version = ARGV[2]
local f = redis.call('HMGET', KEYS[1], 't', 'p', 'v')
if f[1] ~= token then return {-1} end
if f[2] ~= '1' or f[3] ~= seen_version then return {0} end
return {1, redis.call('HINCRBY', KEYS[1], 'v', 1)}
