-- Read the rounds a forwarder claimed (forward_claim.lua) and take, for
-- each one due, the version its job is published with: a forward sent
-- again (its claimer died, or its publish failed) gets another version, so
-- that of two messages of one round only the first to start runs (the
-- other finds the round taken by another version: superseded).
--
-- KEYS: two per round: the round key, then its identity key (the round key
--       and "j"; used by a packed round); then, last, the type's identity
--       hash (deferred.go, idsKey): a packed round's identity waits there,
--       under its round key, from its opening (open_packed.lua) until this
--       moves it to its identity key, where the reaper, the take and a
--       cancel find it from the first forward on
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> slack, ms: a round due within it is forwarded
-- Returns one list per round:
--   {GONE}                         no round held in Redis until due at the
--                                  key (taken, cancelled, or one published
--                                  at its opening): unlist it
--   {WAIT, due}                    not due yet (extended since it was
--                                  listed): list it again at due
--   {PACKED, value, expiry, identity, version}
--                                  a packed round: its value and expiry
--                                  (its token), its identity (JSON, which
--                                  names the token it was written for) and
--                                  the version to publish with
--   {HASH, token, first, due, version, k, g, o, tp, x}
--                                  a hash round: token, first seen, due
--                                  time, the version to publish with and
--                                  its identity fields

local GONE, WAIT, PACKED, HASH = 0, 1, 2, 3
local now, slack = tonumber(ARGV[1]), tonumber(ARGV[2])
local ids = KEYS[#KEYS]
local out = {}
for i = 1, (#KEYS - 1) / 2 do
  local key, idkey = KEYS[2 * i - 1], KEYS[2 * i]
  local kind = redis.call('TYPE', key).ok
  -- The identity of the latest round opened at the key (a field of
  -- the type's hash), moved to the identity key: it replaces any there.
  local moved = redis.call('HGET', ids, key)
  if moved then redis.call('HDEL', ids, key) end
  if kind == 'string' then
    if moved then
      redis.call('HSET', idkey, 'j', moved)
      redis.call('PEXPIREAT', idkey, redis.call('PEXPIRETIME', key))
    end
    local j = redis.call('HGET', idkey, 'j')
    if j then
      out[i] = {PACKED, redis.call('GET', key), redis.call('PEXPIRETIME', key), j, redis.call('HINCRBY', idkey, 'r', 1) - 1}
    else
      out[i] = {GONE}
    end
  elseif kind == 'hash' then
    local f = redis.call('HMGET', key, 't', 'f', 'd', 'v', 'k', 'g', 'o', 'tp', 'x', 'q')
    if f[10] ~= '1' then
      out[i] = {GONE}
    elseif tonumber(f[3]) > now + slack then
      out[i] = {WAIT, f[3]}
    else
      out[i] = {HASH, f[1], f[2], f[3], redis.call('HINCRBY', key, 'v', 1) - 1, f[5], f[6] or '', f[7] or '', f[8] or '', f[9] or ''}
    end
  else
    out[i] = {GONE}
  end
end
return out
