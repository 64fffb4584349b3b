-- A table-level scan's chunk in update mode (consumer.adapters.redis_cache.RedisCache.invalidate_table).
-- KEYS[2i-1] a cache key of the table, KEYS[2i] its version key (schema.keys.version_key:
--            the key's own hash slot)
-- ARGV[1]    the padded source version of the table-level event (the table fence)
-- UNLINKs each key unless its stored version's source part (after the last '/', the whole
-- of it without a version column) is newer than the fence: that value was written by a
-- change committed after the table-level one, while the scan ran, and stays.
-- Returns how many keys existed and were removed.
local removed = 0
for i = 1, #KEYS, 2 do
  local stored = redis.call('GET', KEYS[i + 1])
  local source = stored and string.match(stored, '([^/]*)$')
  if not (source and source > ARGV[1]) then
    removed = removed + redis.call('UNLINK', KEYS[i])
  end
end
return removed
