-- The fill of a reader that missed while an invalidation held the key's fill lease
-- (cachesync.client.read_through, take_lease.lua returned the hold). The server may write a
-- commit to the binlog, and cachesync invalidate, before the commit is visible to this
-- reader's SELECT: what it loaded may be the old row. So the value lives only until the hold
-- ends, and the first miss after that fills with a lease of its own. A later invalidation (a new hold, another value) or a
-- reader's lease taken since refuses the fill.
-- KEYS[1]  the cache key
-- KEYS[2]  its lease key
-- ARGV[1]  the value
-- ARGV[2]  the value's TTL in ms (at most the hold's remaining time is used)
-- ARGV[3]  the hold the reader found at its miss
-- Returns 1 if the value was written (for at most the hold's remaining time), else 0.
if redis.call('GET', KEYS[2]) ~= ARGV[3] then
  return 0
end
local left = redis.call('PTTL', KEYS[2])
if left <= 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', math.min(left, tonumber(ARGV[2])))
return 1
