-- Settle the rounds of a forwarder's claim (forward_claim.lua): unlist the
-- ones forwarded (or gone), list again at a new time the ones not due or
-- whose publish failed. A round whose score is no longer the claim's was
-- listed again meanwhile (a new round of its key opened, or it filled and
-- is due now): it is left as it is.
--
-- KEYS[1] -> the due list
-- ARGV[1] -> the claim's score (the one forward_claim.lua gave its rounds)
-- ARGV[2i], ARGV[2i+1] -> a round key and its new score, "" to unlist it
-- Returns how many rounds were unlisted

local claim = tonumber(ARGV[1])
local args = ARGV
local removed = 0
for i = 2, #args - 1, 2 do
  local member, at = args[i], args[i + 1]
  local score = redis.call('ZSCORE', KEYS[1], member)
  if score and tonumber(score) == claim then
    if at == '' then
      removed = removed + redis.call('ZREM', KEYS[1], member)
    else
      redis.call('ZADD', KEYS[1], at, member)
    end
  end
end
return removed
