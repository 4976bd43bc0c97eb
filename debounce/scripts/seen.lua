-- The packed layout's arithmetic (layout.go), put in place of the SEEN
-- marker of the scripts that need it (scripts.go, withSeen):
-- open_packed.lua, open_held_many.lua, open_round.lua (its throttle
-- window), flush_packed.lua. They define CNT (2^16) and MAXCNT (22 bits)
-- before the marker.

-- seen encodes ms >= 0 as a 16-bit float: exact below 4096, then 11 bits
-- of mantissa under a 5-bit exponent (layout.go, encodeSeen).
local function seen(ms)
  if ms < 2048 then
    if ms < 0 then return 0 end
    return math.floor(ms)
  end
  local e = 1
  while ms >= 4096 do
    ms = math.floor(ms / 2)
    e = e + 1
  end
  if e > 31 then return 65535 end
  return e * 2048 + math.floor(ms) - 2048
end

-- packed_join adds one event to the packed value raw of key: count + 1
-- (saturating) and the greatest seen of now since the key's start (its
-- expiry less its life, ms). INCRBY keeps the TTL and the integer
-- encoding. Returns the new value.
local function packed_join(key, raw, expiry, life, now)
  local v = tonumber(raw)
  local delta = 0
  if math.floor(v / CNT) % 4194304 < MAXCNT then delta = CNT end
  local s, old = seen(now - (expiry - life)), v % CNT
  if s > old then delta = delta + (s - old) end
  if delta ~= 0 then redis.call('INCRBY', key, delta) end
  return v + delta
end
