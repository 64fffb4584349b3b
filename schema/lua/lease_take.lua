-- Take fill leases for a pre-fill (consumer.adapters.redis_cache.RedisCache.take_leases), as
-- cachesync.client.read_through does on a miss: SET NX on the lease of a key holding no value.
-- KEYS[2i-1]  a cache key
-- KEYS[2i]    its lease key (schema.keys.lease_key: the key's own hash slot)
-- ARGV[1]     the filler's token
-- ARGV[2]     the lease's TTL in milliseconds
-- Returns per entry 1 (the lease is the token's), 0 (the key holds a value: left alone) or
-- -1 (another reader holds the lease: its fill is left to it).
local out = {}
for i = 1, #KEYS / 2 do
  if redis.call('EXISTS', KEYS[2 * i - 1]) == 1 then
    out[i] = 0
  elseif redis.call('SET', KEYS[2 * i], ARGV[1], 'NX', 'PX', ARGV[2]) then
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
