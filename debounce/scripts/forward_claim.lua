-- Claim the due rounds of a due list (deferred.go): the rounds of one job
-- type held in Redis until their due time, whose jobs a forwarder publishes.
-- A claimed round stays listed, scored at the claim's end, so that another
-- forwarder takes it over if this one dies before it is done with it.
--
-- KEYS[1] -> the due list: a sorted set of round keys, scored by due time
--            (unix ms)
-- ARGV[1] -> now, unix ms: rounds scored at or before it are due
-- ARGV[2] -> claim at most this many
-- ARGV[3] -> the claim's end, unix ms (with a fraction that tells this
--            claim from another's): the claimed rounds' new score
-- Returns the claimed round keys, earliest due first

local now, limit, claim = ARGV[1], ARGV[2], ARGV[3]
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
if #due == 0 then return due end
local z = {}
for i = 1, #due do
  z[2 * i - 1], z[2 * i] = claim, due[i]
end
redis.call('ZADD', KEYS[1], 'XX', unpack(z))
return due
