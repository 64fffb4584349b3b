-- A reader's miss (cachesync.client.read_through): take the key's fill lease, or say why not.
-- KEYS[1]  the lease key (schema.keys.lease_key)
-- ARGV[1]  the reader's token
-- ARGV[2]  the lease's TTL in ms
-- ARGV[3]  how a held lease's value starts (schema.keys.LEASE_HOLD)
-- Returns 1: the lease is the reader's (it fills with fill_if_lease.lua); the held lease's
-- value: an invalidation holds it (redis.fill_hold_ms: the reader may fill only while that
-- same hold lasts, fill_if_held.lua); 0: another reader holds it (no fill).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[3]) == ARGV[3] then
  return held
end
return 0
