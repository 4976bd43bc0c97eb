-- Mark a run-once claim done after the side effect, if the claim is still
-- the caller's. Duplicates that find "done" are acknowledged without running.
--
-- KEYS[1] -> claim key
-- ARGV[1] -> the caller's claim value ("running:<token>")
-- ARGV[2] -> how long to remember "done", ms
-- Returns 1 marked done, 0 the claim was no longer ours (it expired
-- mid-run: another worker may have run the job too)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
  return 1
end
return 0
