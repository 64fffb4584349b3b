-- Lease-guarded cache fill (cachesync.client.read_through).
-- KEYS[1]  the cache key
-- KEYS[2]  its lease key (schema.keys.lease_key(KEYS[1]))
-- ARGV[1]  the lease token the reader took on its miss
-- ARGV[2]  the value to cache
-- ARGV[3]  TTL in milliseconds
-- Returns 1 if the value was written, 0 if the lease was voided (an invalidation
-- arrived after the reader's miss, so its value may be stale) or taken over.
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
return 1
