-- The join of a hash-layout round: the end of open_round.lua and of
-- join_round.lua (scripts.go appends it to both) and join_many.lua's join
-- function. It expects these locals: key (the round), f (HMGET t f d p v
-- n, then m and q with payload accumulate or z otherwise, of it, a token
-- present), now_arg (the event's time, unix ms, as sent), payload, data,
-- extend_ms, max_wait_ms, max_items, due_list (the type's due list, or nil)
-- and the statuses JOINED and EXTENDED.
-- The reply is one string, the eight numbers separated by spaces (Go:
-- spacedInts): measured under callgrind (issue 25, fourth pass), an array
-- of eight costs Redis more to build and send than the string, and Go's
-- reading of it about six allocations more. Fields the join leaves go
-- into it as Redis gave them, and now_arg is written as sent: a tonumber
-- of a time is a strtod (~1.5k instructions), and a number handed to
-- redis.call a printf of %.17g. scripts/join-cost.sh, per joined event
-- of payload last: 77.2k -> 57.7k instructions.
-- Every field the join changes is written by one HSET, from what the HMGET
-- read (nothing interleaves inside a script): measured, HINCRBY n, HSET l,
-- HINCRBY m and HSET d as calls of their own cost ~1 µs of Redis each
-- (issue 25, third pass).
-- Returns 'status token count first due published fire version'.
local d, version = f[3], f[5]
-- The count as a string, made once: a number would be formatted twice,
-- for the HSET (%.17g) and for the reply (%.14g).
local n = tostring((tonumber(f[6]) or 0) + 1)
local status, fire, moved = JOINED, 0, false
if extend_ms > 0 then
  local nd = tonumber(now_arg) + extend_ms
  local cap = tonumber(f[2]) + max_wait_ms
  if nd > cap then nd = cap end
  if nd > tonumber(d) then
    d = nd
    status = EXTENDED
    moved = true
  end
end
if payload == 'last' then
  -- The round's payload key (lastkey.go), if it has one, stays the latest:
  -- z 0 says it has none; a round without z was opened by an older
  -- version and may have one (SET XX finds out).
  if f[7] ~= '0' then
    redis.call('SET', key .. 'a' .. f[1], data, 'XX', 'KEEPTTL')
  end
  -- Its fields given to HSET as they are, without a table to unpack.
  if moved then
    redis.call('HSET', key, 'n', n, 'l', now_arg, 'a', data, 'd', d)
  else
    redis.call('HSET', key, 'n', n, 'l', now_arg, 'a', data)
  end
else
  -- Payload first (an extended round) or accumulate: HSET too is given its
  -- fields without a table, but for the join that fills the round. A table
  -- and its unpack cost a join ~2k instructions (scripts/join-cost.sh).
  local item = payload == 'accumulate' and 'i' .. data
  if item and redis.call('HEXISTS', key, item) == 0 then
    -- A new distinct item: m counts them; the one that fills the round
    -- makes it due now. HEXISTS, not HSETNX: a read, so that the join is one
    -- write (one command to the AOF and the replicas, no MULTI around it).
    local m = (tonumber(f[7]) or 0) + 1
    if m == max_items then
      local h = {'n', n, 'l', now_arg, 'm', m, item, '1'}
      d = tonumber(now_arg)
      if due_list and f[8] == '1' then
        -- Held in the due list: due now, the forwarder publishes it.
        redis.call('ZADD', due_list, d, key)
      else
        fire = 1
        version = tonumber(version) + 1
        h[#h + 1], h[#h + 2] = 'v', version
      end
      h[#h + 1], h[#h + 2] = 'd', d
      redis.call('HSET', key, unpack(h))
    elseif moved then
      redis.call('HSET', key, 'n', n, 'l', now_arg, 'm', tostring(m), item, '1', 'd', d)
    else
      redis.call('HSET', key, 'n', n, 'l', now_arg, 'm', tostring(m), item, '1')
    end
  elseif moved then
    redis.call('HSET', key, 'n', n, 'l', now_arg, 'd', d)
  else
    redis.call('HSET', key, 'n', n, 'l', now_arg)
  end
end
return (status == JOINED and '0 ' or '4 ') .. f[1] .. ' ' .. n .. ' ' .. f[2] .. ' ' .. d .. ' ' .. f[4] ..
  (fire == 1 and ' 1 ' or ' 0 ') .. version
