-- Close a hash-layout round if it is still the caller's and is due. At job
-- start ("take") the round moves to a per-token key that keeps its summary
-- (last args, accumulated items) for retries of the same job until Finish
-- deletes it; its field s counts the deliveries that reached this point
-- (deliveries that died before it are not attempts). An extended round that
-- is not due yet stays; its version is incremented so the caller publishes
-- the schedule again for the new due time. A stale token changes nothing.
--
-- KEYS[1] -> round key (hash)
-- KEYS[2] -> taken key of this token (for "take")
-- KEYS[3] -> done marker of this token (for "take"): Finish leaves it for a
--            while, so a delivery after the job finished does not run again
-- KEYS[4] -> throttle trailing round: the throttle window key, reopened at
--            take (the trailing job starts the next window, as lodash's
--            throttle does); optional
-- ARGV[1] -> the round's token (decimal)
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> slack, ms: a round due within it counts as due
-- ARGV[4] -> "take" (job start), "backout" (failed publish: delete only if
--            not published meanwhile) or "cancel" (delete, due or not)
-- ARGV[5] -> take: how long the taken copy is kept, ms
-- ARGV[6] -> take: the version of the job's message (kept as tv: another
--            version of the round finding it taken does not run)
-- ARGV[7] -> with KEYS[4]: the window's length, ms
-- ARGV[8] -> with KEYS[4]: the value to open the window with
-- Returns:
--   {1, field, value, ...}  closed: every field of the hash
--   {0}                     missing
--   {-1}                    stale token
--   {2, due, version}       not due yet (take only)
--   {3}                     kept: published meanwhile (backout only)
--   {6}                     shared: joined meanwhile, not yet published
--                           (backout only): the joiner publishes it, or
--                           fails too and the reaper releases it
--   {5, field, value, ...}  retry: already taken by an earlier delivery of
--                           this message (field s: deliveries that reached it,
--                           this one included)
--   {7}                     superseded: taken by another version's message
--   {8}                     done: its job finished (Finish) a moment ago

local key = KEYS[1]
local t = redis.call('HGET', key, 't')
if t ~= ARGV[1] then
  if ARGV[4] == 'take' and redis.call('EXISTS', KEYS[2]) == 1 then
    local tv = redis.call('HGET', KEYS[2], 'tv')
    if tv and tv ~= ARGV[6] then return {7} end
    redis.call('HINCRBY', KEYS[2], 's', 1)
    local out = {5}
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all do out[i + 1] = all[i] end
    return out
  end
  if ARGV[4] == 'take' and KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
    return {8}
  end
  if t then return {-1} end
  return {0}
end
if ARGV[4] == 'backout' then
  local f = redis.call('HMGET', key, 'p', 'n')
  if f[1] == '1' then return {3} end
  if tonumber(f[2]) > 1 then return {6} end
end
if ARGV[4] == 'take' then
  local d = tonumber(redis.call('HGET', key, 'd'))
  if d > tonumber(ARGV[2]) + tonumber(ARGV[3]) then
    return {2, d, redis.call('HINCRBY', key, 'v', 1)}
  end
end
local all = redis.call('HGETALL', key)
if ARGV[4] == 'take' then
  if KEYS[4] then redis.call('SET', KEYS[4], ARGV[8], 'PX', ARGV[7]) end
  redis.call('RENAME', key, KEYS[2])
  redis.call('HSET', KEYS[2], 's', 1, 'tv', ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
else
  redis.call('DEL', key)
end
local out = {1}
for i = 1, #all do out[i + 1] = all[i] end
return out
