-- Extend a run-once claim while a long handler runs, if it is still the
-- caller's.
--
-- KEYS[1] -> claim key
-- ARGV[1] -> the caller's claim value ("running:<token>")
-- ARGV[2] -> claim lifetime from now, ms
-- Returns 1 extended, 0 not ours

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
