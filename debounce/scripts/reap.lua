-- Release a round that stayed unpublished and untouched since the reaper's
-- previous pass: its producer died between reserving and publishing, and no
-- event joined since (a joiner would have published it). Nothing was
-- accepted into such a round, so releasing it loses nothing.
--
-- KEYS[1] -> round key
-- ARGV[1] -> what the previous pass saw: the packed value (string layout),
--            or the token (hash layout)
-- ARGV[2] -> hash layout: the event count the previous pass saw
-- Returns 1 released, 0 changed meanwhile (or gone, or published)

local seen_value = ARGV[1]
local seen_events = ARGV[2]
local PUB = 274877906944 -- 2^38
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then
  local v = redis.call('GET', KEYS[1])
  if v == seen_value and math.floor(tonumber(v) / PUB) % 2 == 0 then
    redis.call('DEL', KEYS[1])
    return 1
  end
elseif t == 'hash' then
  local f = redis.call('HMGET', KEYS[1], 't', 'n', 'p')
  if f[1] == seen_value and f[2] == seen_events and f[3] == '0' then
    redis.call('DEL', KEYS[1], KEYS[1] .. 'a' .. f[1]) -- and its payload key (lastkey.go)
    return 1
  end
end
return 0
