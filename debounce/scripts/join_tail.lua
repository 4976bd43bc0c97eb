-- The join of a hash-layout round: the end of open_round.lua and of
-- join_round.lua (scripts.go appends it to both). It expects these locals:
-- key (the round), f (HMGET t f d p v of it, a token present), now,
-- payload, data, extend_ms, max_wait_ms, max_items, add_item (accumulate:
-- adds data as an item, returns the distinct items or -1), due_list (the
-- type's due list, or nil) and the statuses JOINED and EXTENDED.
-- Returns {status, token, count, first, due, published, fire, version}.
local first, d, version = tonumber(f[2]), tonumber(f[3]), tonumber(f[5])
local n = redis.call('HINCRBY', key, 'n', 1)
if payload == 'last' then
  redis.call('HSET', key, 'l', now, 'a', data)
  -- The round's payload key (lastkey.go), if it has one, stays the latest.
  redis.call('SET', key .. 'a' .. f[1], data, 'XX', 'KEEPTTL')
else
  redis.call('HSET', key, 'l', now)
end
local status, fire = JOINED, 0
if extend_ms > 0 then
  local nd = now + extend_ms
  local cap = first + max_wait_ms
  if nd > cap then nd = cap end
  if nd > d then
    d = nd
    status = EXTENDED
    redis.call('HSET', key, 'd', d)
  end
end
if payload == 'accumulate' and add_item() == max_items then
  d = now
  redis.call('HSET', key, 'd', d)
  if due_list and redis.call('HGET', key, 'q') == '1' then
    -- Held in the due list: due now, the forwarder publishes it.
    redis.call('ZADD', due_list, d, key)
  else
    fire = 1
    version = redis.call('HINCRBY', key, 'v', 1)
  end
end
return {status, f[1], n, first, d, tonumber(f[4]), fire, version}
