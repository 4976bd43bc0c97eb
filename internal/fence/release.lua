-- Give up a key held by an owner (a run-once claim after a failed run, an
-- exclusive key's lease after its job), if the caller still holds it.
--
-- KEYS[1] -> the held key
-- ARGV[1] -> the caller's value in it
-- Returns 1 released, 0 not the caller's (left alone)
local owner = ARGV[1]

if redis.call('GET', KEYS[1]) == owner then
  return redis.call('DEL', KEYS[1])
end
return 0
