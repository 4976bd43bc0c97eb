-- Close a packed round if it is still the caller's: same expiry and same
-- random bits, the two halves of its token. A stale token changes nothing.
-- At job start ("take") the round moves to a per-token hash that keeps its
-- summary (field v) for retries of the same job until Finish deletes it, and
-- counts the deliveries that reached this point (field s): deliveries that
-- died before it (a killed worker's prefetch) are not attempts.
--
-- KEYS[1] -> round key
-- KEYS[2] -> taken key of this token (for "take")
-- KEYS[3] -> the round's identity key (note_overdue.lua), deleted with the
--            round; optional
-- KEYS[4] -> done marker of this token (for "take"): Finish leaves it for a
--            while, so a delivery after the job finished does not run again
-- KEYS[5] -> throttle trailing round: the throttle window key, reopened at
--            take (the trailing job starts the next window, as lodash's
--            throttle does); optional
-- ARGV[1] -> the round's expiry, unix ms (token >> 14)
-- ARGV[2] -> the round's random bits (token & 0x3fff)
-- ARGV[3] -> "take" (job start), "release" (dedup until success, cancel),
--            "backout" (a failed publish: delete only if not published meanwhile)
-- ARGV[4] -> take: how long the taken copy is kept, ms
-- ARGV[5] -> take: the version of the job's message (kept as tv: another
--            version of the round finding it taken does not run)
-- ARGV[6] -> with KEYS[5]: the window's length, ms
-- ARGV[7] -> with KEYS[5]: the value to open the window with
-- ARGV[8] -> take: the round's due time, unix ms ("0": immediate); a round
--            not due (within ARGV[10]) is not taken: events may still be
--            joining it (local joins count on this, local.go)
-- ARGV[9] -> take: now, unix ms
-- ARGV[10] -> take: slack, ms: a round due within it counts as due
-- Returns {status, value, starts}:
--   CLOSED (value: the packed value, for the summary; starts 1 when taken)
--   MISSING (expired, or already closed)
--   STALE token: another round holds the key (value: its packed value)
--   KEPT: published meanwhile by a joiner (backout only)
--   SHARED: joined meanwhile, not yet published (backout only): the
--     joiner publishes it, or fails too and the reaper releases it
--   RETRY: already taken by an earlier delivery of this message (value:
--     the taken copy; starts: deliveries that reached it, this one included)
--   SUPERSEDED: taken by another version's message (take only)
--   DONE: its job finished (Finish) a moment ago (take only)
--   NOT_DUE: not due yet (take only; value: the due time)

-- Statuses: one code per meaning in every script that closes a round
-- (Go: the close* constants in scripts.go; TestScriptStatuses checks them).
local expiry = ARGV[1]
local rnd = ARGV[2]
local op = ARGV[3]
local taken_ttl = ARGV[4]
local job_version = ARGV[5]
local window_ms = ARGV[6]
local window_value = ARGV[7]
local due, now, slack = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local STALE, MISSING, CLOSED, NOT_DUE, KEPT, SHARED, RETRY, SUPERSEDED, DONE = -1, 0, 1, 2, 3, 4, 5, 6, 7

local RND, PUB, CNT = 549755813888, 274877906944, 65536 -- 2^39, 2^38, 2^16
local raw = redis.call('GET', KEYS[1])
local mine = false
local v = 0
if raw then
  v = tonumber(raw)
  mine = redis.call('PEXPIRETIME', KEYS[1]) == tonumber(expiry) and math.floor(v / RND) == tonumber(rnd)
end
if not mine then
  if op == 'take' then
    local kind = redis.call('TYPE', KEYS[2]).ok
    if kind == 'string' then -- taken by a version that kept no count
      return {RETRY, tonumber(redis.call('GET', KEYS[2])), 0}
    end
    if kind == 'hash' then
      local tv = redis.call('HGET', KEYS[2], 'tv')
      if tv and tv ~= job_version then return {SUPERSEDED, 0} end
      local taken = redis.call('HGET', KEYS[2], 'v')
      if taken then
        return {RETRY, tonumber(taken), redis.call('HINCRBY', KEYS[2], 's', 1)}
      end
      -- No value: a copy that only counts the starts of a job whose round
      -- was missing (count_start.lua); missing still, counted by the caller.
    end
    if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 then return {DONE, 0} end
  end
  if raw then return {STALE, v} end
  return {MISSING, 0}
end
if op == 'take' and due > 0 and now + slack < due then return {NOT_DUE, due, 0} end
if op == 'backout' then
  if math.floor(v / PUB) % 2 == 1 then return {KEPT, v} end
  if math.floor(v / CNT) % 4194304 > 1 then return {SHARED, v} end
end
redis.call('DEL', KEYS[1])
if KEYS[3] then redis.call('DEL', KEYS[3]) end
if op == 'take' then
  if KEYS[5] then redis.call('SET', KEYS[5], window_value, 'PX', window_ms) end
  redis.call('HSET', KEYS[2], 'v', raw, 's', 1, 'tv', job_version)
  redis.call('PEXPIRE', KEYS[2], taken_ttl)
  return {CLOSED, v, 1}
end
return {CLOSED, v, 0}
