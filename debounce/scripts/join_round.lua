-- Join the pending hash-layout round of a debounce key (extend, payload
-- last or accumulate) without the arguments an opening needs: sent first
-- while most of a type's events join rounds (plainopen.go, openGuess),
-- which saves Redis the opening's identity arguments on every join. A key
-- with no round is left alone: the caller opens it with open_round.lua.
--
-- KEYS[1] -> round key (hash)
-- KEYS[2] -> the type's due list, when its rounds may be held in Redis
--            (deferred.go): a round held there that this event fills goes
--            to now in it
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> extend: window ms, "0" when not extending
-- ARGV[3] -> extend: max wait ms from the first event
-- ARGV[4] -> payload: "first", "last" or "accumulate" ("last+": last)
-- ARGV[5] -> the event's args (last) or item (accumulate); "" for first
-- ARGV[6] -> max items (accumulate)
-- Returns {ABSENT} when the key holds no round (nothing written), else
-- open_round.lua's join reply (scripts/join_tail.lua, appended by
-- scripts.go): 'status token count first due published fire version'

-- Statuses: open_round.lua's, and ABSENT (Go: statusAbsent).
local JOINED, OPENED, LEADING, THROTTLED, EXTENDED, ABSENT = 0, 1, 2, 3, 4, -1

local key = KEYS[1]
local due_list = KEYS[2]
local now_arg = ARGV[1]
local extend_ms, max_wait_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local payload, data, max_items = ARGV[4], ARGV[5], tonumber(ARGV[6])
if payload == 'last+' then payload = 'last' end

-- The fields the join reads (scripts/join_fields.lua): f.
--FIELDS--
if not f[1] then return {ABSENT} end

