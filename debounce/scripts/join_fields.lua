-- The fields of a hash-layout round that a join reads (join_tail.lua): put
-- in place of the FIELDS marker of join_round.lua, join_many.lua and
-- open_round.lua by scripts.go. It expects the locals key and payload.
-- f[7] is m with payload accumulate, z otherwise; f[8] q, with accumulate
-- only (the join that fills a round reads it). Each field costs HMGET a
-- scan of the hash: without q, a payload-last join costs Redis 5% less
-- (callgrind, issue 25).
local f
if payload == 'accumulate' then
  f = redis.call('HMGET', key, 't', 'f', 'd', 'p', 'v', 'n', 'm', 'q')
else
  f = redis.call('HMGET', key, 't', 'f', 'd', 'p', 'v', 'n', 'z')
end
