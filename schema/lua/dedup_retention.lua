-- The longest retention a namespace's Redis dedup records may carry, for the purge.
-- KEYS[1]  cachesync:dedup-retention:<ns>
-- ARGV[1]  this writer's retention in ms (the TTL of every record it writes)
-- ARGV[2]  how long the stored value lives, in ms: the retention plus the writer's
--          renewal interval, so it outlives every record written before its next renewal
-- A writer whose retention is the longest (or equal) stores it and renews its TTL; a
-- shorter one leaves a longer one in place, which then lives as long as its own writers'
-- records. No value, or one no longer than the purge's retention: no record can be older
-- than that retention (each one expires first), and the purge has nothing to scan for.
-- Returns the value held before (nil: none).
local held = redis.call('GET', KEYS[1])
if held == false or tonumber(held) <= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return held
