-- Lease-guarded fills of a pre-fill (consumer.adapters.redis_cache.RedisCache.fill_leased):
-- read_through's fill_if_lease for many keys, JSON strings or hashes.
-- KEYS[2i-1]  a cache key
-- KEYS[2i]    its lease key (schema.keys.lease_key: the key's own hash slot)
-- ARGV[1]     the filler's token (lease_take.lua)
-- ARGV[3i-1]  kind: 'json' (SET the value) or 'hash' (the fields of a JSON array
--             [field, value, ...])
-- ARGV[3i]    the value
-- ARGV[3i+1]  its TTL in milliseconds
-- An entry is written only while its lease is still the token's: an invalidation since the
-- lease was taken deleted it (the row read after it may be stale), or another reader took it
-- over after it expired. The lease is deleted with the fill.
-- Returns per entry 1 (written) or 0 (refused: the lease was voided or taken over).
local out = {}
for i = 1, #KEYS / 2 do
  local key, lkey, a = KEYS[2 * i - 1], KEYS[2 * i], 3 * i - 1
  if redis.call('GET', lkey) ~= ARGV[1] then
    out[i] = 0
  else
    local kind, value, ttl = ARGV[a], ARGV[a + 1], ARGV[a + 2]
    if kind == 'json' then
      redis.call('SET', key, value, 'PX', ttl)
    else
      redis.call('DEL', key)
      local fields = cjson.decode(value)
      if #fields > 0 then
        redis.call('HSET', key, unpack(fields))
        redis.call('PEXPIRE', key, ttl)
      end
    end
    redis.call('DEL', lkey)
    out[i] = 1
  end
end
return out
