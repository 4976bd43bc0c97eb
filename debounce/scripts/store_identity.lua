-- Write a store identity where there is none, and return the one there is
-- (store.go): the identity of the Redis rounds are reserved in.
--
-- KEYS[1] -> the store identity (prefix .. "store"), no TTL
-- ARGV[1] -> a new identity (JSON: id, created, addr)
-- Returns the identity now there
local fresh = ARGV[1]

local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], fresh)
return fresh
