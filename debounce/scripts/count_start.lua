-- Count a start of a job that closes no round at start (a throttle leading
-- job, dedup until success or expiry): its deliveries that reached Start are
-- its attempts, kept in a small hash (field s) until Finish. A delivery that
-- comes after the job finished (the done marker Finish leaves) does not run.
--
-- KEYS[1] -> the job's taken key (starts)
-- KEYS[2] -> the job's done marker
-- ARGV[1] -> how long the count is kept, ms
-- Returns the starts, this one included; -1 when the job is done

local keep_ms = ARGV[1]
if redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local n = redis.call('HINCRBY', KEYS[1], 's', 1)
redis.call('PEXPIRE', KEYS[1], keep_ms)
return n
