-- Extend a key held by an owner (a run-once claim, an exclusive key's
-- lease), if the caller still holds it.
--
-- KEYS[1] -> the held key
-- ARGV[1] -> the caller's value in it
-- ARGV[2] -> its lifetime from now, ms
-- Returns 1 extended, 0 not the caller's (it lapsed, or another holds it)
local owner = ARGV[1]
local ttl_ms = ARGV[2]

if redis.call('GET', KEYS[1]) == owner then
  return redis.call('PEXPIRE', KEYS[1], ttl_ms)
end
return 0
