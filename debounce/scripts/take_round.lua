-- Close a hash-layout round if it is still the caller's and is due: take its
-- summary and delete it (release at start). An extended round that is not
-- due yet stays; its version is incremented so the caller publishes the
-- schedule again for the new due time. A stale token changes nothing.
--
-- KEYS[1] -> round key (hash)
-- ARGV[1] -> the round's token (decimal)
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> slack, ms: a round due within it counts as due
-- ARGV[4] -> "take" (at start), "backout" (failed publish: delete only if
--            not published meanwhile) or "cancel" (delete, due or not)
-- Returns:
--   {1, field, value, ...}  released: every field of the hash
--   {0}                     missing
--   {-1}                    stale token
--   {2, due, version}       not due yet (take only)
--   {3}                     kept: published meanwhile (backout only)

local key = KEYS[1]
local t = redis.call('HGET', key, 't')
if not t then return {0} end
if t ~= ARGV[1] then return {-1} end
if ARGV[4] == 'backout' and redis.call('HGET', key, 'p') == '1' then
  return {3}
end
if ARGV[4] == 'take' then
  local d = tonumber(redis.call('HGET', key, 'd'))
  if d > tonumber(ARGV[2]) + tonumber(ARGV[3]) then
    return {2, d, redis.call('HINCRBY', key, 'v', 1)}
  end
end
local all = redis.call('HGETALL', key)
redis.call('DEL', key)
local out = {1}
for i = 1, #all do out[i + 1] = all[i] end
return out
