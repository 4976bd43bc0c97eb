-- seen encodes ms >= 0 as a 16-bit float: exact below 4096, then 11 bits
-- of mantissa under a 5-bit exponent (layout.go, encodeSeen). Put in place
-- of the SEEN marker of the scripts that need it (scripts.go, withSeen):
-- open_packed.lua, open_held_many.lua, flush_packed.lua.
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
