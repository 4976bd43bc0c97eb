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
--   {CLOSED, field, value, ...}  closed: every field of the hash
--   {MISSING}                    no round
--   {STALE}                      stale token
--   {NOT_DUE, due, version}      not due yet (take only)
--   {KEPT}                       published meanwhile (backout only)
--   {SHARED}                     joined meanwhile, not yet published
--                                (backout only): the joiner publishes it, or
--                                fails too and the reaper releases it
--   {RETRY, field, value, ...}   already taken by an earlier delivery of this
--                                message (field s: deliveries that reached
--                                it, this one included)
--   {SUPERSEDED}                 taken by another version's message
--   {DONE}                       its job finished (Finish) a moment ago

-- Statuses: one code per meaning in every script that closes a round
-- (Go: the close* constants in scripts.go; TestScriptStatuses checks them).
local token = ARGV[1]
local now = ARGV[2]
local slack = ARGV[3]
local op = ARGV[4]
local taken_ttl = ARGV[5]
local job_version = ARGV[6]
local window_ms = ARGV[7]
local window_value = ARGV[8]
local STALE, MISSING, CLOSED, NOT_DUE, KEPT, SHARED, RETRY, SUPERSEDED, DONE = -1, 0, 1, 2, 3, 4, 5, 6, 7

local key = KEYS[1]
local t = redis.call('HGET', key, 't')
if t ~= token then
  if op == 'take' and redis.call('EXISTS', KEYS[2]) == 1 then
    local tv = redis.call('HGET', KEYS[2], 'tv')
    if tv and tv ~= job_version then return {SUPERSEDED} end
    redis.call('HINCRBY', KEYS[2], 's', 1)
    local out = {RETRY}
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all do out[i + 1] = all[i] end
    return out
  end
  if op == 'take' and KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
    return {DONE}
  end
  if t then return {STALE} end
  return {MISSING}
end
if op == 'backout' then
  local f = redis.call('HMGET', key, 'p', 'n')
  if f[1] == '1' then return {KEPT} end
  if tonumber(f[2]) > 1 then return {SHARED} end
end
if op == 'take' then
  local d = tonumber(redis.call('HGET', key, 'd'))
  if d > tonumber(now) + tonumber(slack) then
    return {NOT_DUE, d, redis.call('HINCRBY', key, 'v', 1)}
  end
end
-- The round's payload key (lastkey.go): its latest args, written by
-- producers that knew the round, go into the job's summary and the taken
-- copy; closed, the key goes with the round, so that no later SET XX
-- lands in it.
local pk = key .. 'a' .. token
local latest = redis.call('GET', pk)
if latest then
  if op == 'take' then redis.call('HSET', key, 'a', latest) end
  redis.call('DEL', pk)
end
local all = redis.call('HGETALL', key)
if op == 'take' then
  if KEYS[4] then redis.call('SET', KEYS[4], window_value, 'PX', window_ms) end
  redis.call('RENAME', key, KEYS[2])
  redis.call('HSET', KEYS[2], 's', 1, 'tv', job_version)
  redis.call('PEXPIRE', KEYS[2], taken_ttl)
else
  redis.call('DEL', key)
end
local out = {CLOSED}
for i = 1, #all do out[i + 1] = all[i] end
return out
