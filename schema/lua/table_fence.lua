-- Table-level fence (consumer.adapters.redis_cache.RedisCache.invalidate_table).
-- KEYS[1] cachesync:table:<db.table>
-- ARGV[1] the padded source version of a table-level event (truncate, drop, ...)
-- Keeps the newest version: update-mode writes of that table whose source version
-- is not newer are turned into deletes (consumer.core.writes.fence_by_table).
-- Returns the stored version.
local stored = redis.call('GET', KEYS[1])
if not stored or stored < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return stored
