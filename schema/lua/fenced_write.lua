-- Fenced writes for update mode (consumer.adapters.redis_cache.RedisCache.write).
-- Entry i uses KEYS[3i-2] the cache key, KEYS[3i-1] its version key,
-- KEYS[3i] its fill lease (schema.keys.version_key / lease_key), and
-- ARGV[5i-4] kind: 'json' (SET the value), 'hash' (replace the hash with the
--            fields of a JSON array [field, value, ...]) or 'del' (delete)
-- ARGV[5i-3] the version: a string that sorts like the row's history
-- ARGV[5i-2] the value (empty for 'del')
-- ARGV[5i-1] the value's TTL in ms (for 'del': how long the tombstone lives)
-- ARGV[5i]   the version key's TTL in ms (never shorter than the value's)
-- An entry is refused when the stored version is newer: a replay, a late
-- duplicate or an out-of-order update never overwrites newer data, and a delete's
-- tombstone refuses the older updates that arrive after it. Applying the same
-- version twice is harmless (same value), so equal versions are applied.
-- Every applied entry also deletes the fill lease, voiding read_through fills that
-- loaded the row before this change.
-- A version column going backwards is not a stale replay: when both versions are
-- 'column/source' and the incoming source position is newer than the stored one, the
-- row's version column decreased (5, then 3), so the cached value is no longer the
-- database's: the key and its lease are deleted, the stored version is kept (older
-- replays stay refused). consumer.core.writes.fence is the same decision in Python.
-- Returns per entry 1 (applied), 0 (refused) or 2 (invalidated: version went backwards).
local out = {}
for i = 1, #KEYS / 3 do
  local key, vkey, lkey = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local a = 5 * i - 4
  local kind, version, value = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local stored = redis.call('GET', vkey)
  if stored and stored > version then
    local stored_source = string.match(stored, '/(%d+)$')
    local source = string.match(version, '/(%d+)$')
    if stored_source and source and source > stored_source then
      redis.call('DEL', key)
      redis.call('DEL', lkey)
      out[i] = 2
    else
      out[i] = 0
    end
  else
    if kind == 'json' then
      redis.call('SET', key, value, 'PX', ARGV[a + 3])
    else
      redis.call('DEL', key)
      if kind == 'hash' then
        local fields = cjson.decode(value)
        if #fields > 0 then
          redis.call('HSET', key, unpack(fields))
          redis.call('PEXPIRE', key, ARGV[a + 3])
        end
      end
    end
    redis.call('SET', vkey, version, 'PX', ARGV[a + 4])
    redis.call('DEL', lkey)
    out[i] = 1
  end
end
return out
