-- Decide an event at most once per idempotency key: the decision script
-- (open_packed.lua or open_round.lua, unchanged) is inserted below as the
-- body of decide(), and sees the KEYS and ARGV it always gets. The record
-- is written in the same script call as the decision, so no crash or
-- concurrent retry can separate the two (idempotency.go).
--
-- KEYS[1..n-1] -> the decision script's KEYS
-- KEYS[n]      -> the idempotency record (shares the round's hash tag)
-- ARGV[1..m-2] -> the decision script's ARGV
-- ARGV[m-1]    -> digest of the event (its type, key and canonical args)
-- ARGV[m]      -> how long the record is kept, ms
-- ARGV[1], ARGV[2] -> (the decision's) for open_packed.lua, the value and
--                 expiry of a round it opens: its reply is then OPENED
--                 alone, and the record holds {OPENED, value, expiry}
-- Returns:
--   {REUSED}                  the key was used with another event: nothing done
--   decide()'s reply .. FRESH  decided now, and recorded
--   the recorded reply .. REPLAYED  decided earlier: that reply (as strings)

-- Statuses (Go: the idem* constants in idempotency.go; TestScriptStatuses
-- checks them).
local REUSED, FRESH, REPLAYED = -1, 0, 1

local record, window, digest = KEYS[#KEYS], ARGV[#ARGV], ARGV[#ARGV - 1]
local opened_value, opened_expiry = ARGV[1], ARGV[2]
local rec = redis.call('GET', record)
if rec then
  local sep = string.find(rec, '\n', 1, true)
  if not sep or string.sub(rec, 1, sep - 1) ~= digest then
    return {REUSED}
  end
  local out = {}
  for v in string.gmatch(string.sub(rec, sep + 1), '[^,]+') do
    out[#out + 1] = v
  end
  out[#out + 1] = REPLAYED
  return out
end

-- The decision script's view: its own KEYS and ARGV (locals shadow the
-- globals inside decide; the tables themselves are left as Redis made them).
local KEYS = {unpack(KEYS, 1, #KEYS - 1)}
local ARGV = {unpack(ARGV, 1, #ARGV - 2)}

local function decide()
--DECIDE--
end

local res = decide()
if type(res) == 'number' then
  -- open_packed.lua's bare OPENED: recorded, and answered, as the table
  -- its other replies are.
  res = {res, tonumber(opened_value), tonumber(opened_expiry)}
elseif type(res) == 'string' then
  -- open_round.lua's join (join_tail.lua): its numbers in one string,
  -- recorded, and answered, as a table like its opening's.
  local t = {}
  for v in string.gmatch(res, '%S+') do t[#t + 1] = v end
  res = t
end
local parts = {}
for i, v in ipairs(res) do
  -- %.0f: tostring would write integers above 2^47 with 14 digits
  if type(v) == 'number' then parts[i] = string.format('%.0f', v) else parts[i] = v end
end
redis.call('SET', record, digest .. '\n' .. table.concat(parts, ','), 'PX', window)
res[#res + 1] = FRESH
return res
