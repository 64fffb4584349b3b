-- Fenced writes for update mode (consumer.adapters.redis_cache.RedisCache.write).
-- Entry i uses n = #KEYS / (#ARGV / 5) keys (3, or 5 during a single-node upgrade), from
-- KEYS[n(i-1)+1] the cache key, KEYS[n(i-1)+2] its version key, KEYS[n(i-1)+3] its fill
-- lease (schema.keys.version_key / lease_key: the key's own hash slot), and with n = 5
-- KEYS[n(i-1)+4] / KEYS[n(i-1)+5] the old untagged version key and lease
-- (schema.keys.legacy_version_key / legacy_lease_key), and
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
-- The stored version is the newer of the version key and the old untagged one (n = 5),
-- so a version written before the upgrade still fences; an applied entry moves it to the
-- new name (the old one is deleted).
-- Every applied entry also deletes the fill lease, voiding read_through fills that
-- loaded the row before this change.
-- A version column going backwards is not a stale replay: when both versions are
-- 'column/source' and the incoming source position is newer than the stored one, the
-- row's version column decreased (5, then 3), so the cached value is no longer the
-- database's: the key and its lease are deleted, the stored version is kept (older
-- replays stay refused). consumer.core.writes.fence is the same decision in Python.
-- Returns per entry 1 (applied), 0 (refused) or 2 (invalidated: version went backwards).
local out = {}
-- delete the fill lease (and the old untagged one)
local function unlease(lkey, k, n)
  redis.call('DEL', lkey)
  if n == 5 then
    redis.call('DEL', KEYS[k + 5])
  end
end
local entries = #ARGV / 5
local n = #KEYS / entries
for i = 1, entries do
  local k = n * (i - 1)
  local key, vkey, lkey = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local a = 5 * i - 4
  local kind, version, value = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local stored = redis.call('GET', vkey)
  if n == 5 then
    local old = redis.call('GET', KEYS[k + 4])
    if old and (not stored or old > stored) then
      stored = old
    end
  end
  if stored and stored > version then
    local stored_source = string.match(stored, '/(%d+)$')
    local source = string.match(version, '/(%d+)$')
    if stored_source and source and source > stored_source then
      redis.call('DEL', key)
      unlease(lkey, k, n)
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
    if n == 5 then
      redis.call('DEL', KEYS[k + 4])
    end
    unlease(lkey, k, n)
    out[i] = 1
  end
end
return out
