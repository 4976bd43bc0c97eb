-- Give up the claim on a stored event's decision (ingest.go, claim): delete
-- the mark only while it still holds this claim. A decided mark ("1"), or
-- another decider's claim taken after this one expired, is left alone.
--
-- KEYS[1] -> the stored event's decided mark
-- ARGV[1] -> the claim this decider took
-- Returns 1 when it deleted the claim, 0 otherwise.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
