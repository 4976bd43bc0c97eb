-- Take back the start a delivery counted in a taken round's copy (field s)
-- when the delivery does not run after all: its take was not confirmed by
-- the replicas (replication acks, fail: closed), and the next delivery
-- counts again. A copy gone meanwhile is left gone.
--
-- KEYS[1] -> taken key of the round's token (a hash with field s)
-- Returns the count left, or -1 when there is no copy.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('HINCRBY', KEYS[1], 's', -1)
