-- Join the pending hash-layout rounds of several events of one type that
-- meet in one pipeline (batch.go, merge.go): what join_round.lua does for
-- one event, for each, in the order they came, in one script call (a call
-- costs Redis ~4.6 µs beyond its commands, issue 25, third pass). The join
-- itself is join_tail.lua, put in place of the JOIN marker below by
-- scripts.go, run once per event as join_round.lua runs it.
--
-- KEYS[1] -> the type's due list, when its rounds may be held in Redis
--            (the first argument says whether it is there); then the
--            events' round keys (hash), one per event
-- ARGV: first five, for all the events: "1" when KEYS[1] is the due list
--       ("0" when not), then as join_round.lua's: extend (window ms, "0"
--       when not extending), max wait ms from the first event, the payload
--       ("first", "last", "accumulate"; "last+": last) and max items;
--       then two per event, those of the k-th at 5+2k-1 and 5+2k: now
--       (unix ms) and its args (last) or item (accumulate), "" for first
-- Returns one reply per event, in order: join_round.lua's ({ABSENT}, or
-- 'status token count first due published fire version').

-- Statuses: open_round.lua's, and ABSENT (Go: statusAbsent).
local JOINED, OPENED, LEADING, THROTTLED, EXTENDED, ABSENT = 0, 1, 2, 3, 4, -1

local args = ARGV
local held = args[1] == '1'
local extend_ms, max_wait_ms = tonumber(args[2]), tonumber(args[3])
local payload, max_items = args[4], tonumber(args[5])
if payload == 'last+' then payload = 'last' end
local due_list, from = nil, 1
if held then due_list, from = KEYS[1], 2 end

-- The join of one event: a function made once, not a closure per event
-- (measured under callgrind, issue 25, fourth pass: ~2.6k of a join's
-- ~75k instructions).
local function join(key, f, now_arg, data)
--JOIN--
end

local out = {}
for i = from, #KEYS do
  local key, j = KEYS[i], 5 + 2 * (i - from) + 1
  -- The fields the join reads (scripts/join_fields.lua): f.
  --FIELDS--
  if not f[1] then
    out[#out + 1] = {ABSENT}
  else
    out[#out + 1] = join(key, f, args[j], args[j + 1])
  end
end
return out
