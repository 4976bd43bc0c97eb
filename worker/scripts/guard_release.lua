-- Release a run-once claim after a failed run, if it is still the caller's,
-- so a retry can claim it at once.
--
-- KEYS[1] -> claim key
-- ARGV[1] -> the caller's claim value ("running:<token>")
-- Returns 1 released, 0 not ours (left alone)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
