-- Claim, invalidate and confirm in one call, for a dedup store on the cache's own Redis
-- server (consumer.adapters.redis_dedup.RedisDedupStore.claim_unlink).
-- KEYS     per message id, in order: its record key, then the cache keys its change
--          invalidates, then their fill-lease keys
-- ARGV[1]  how long a record lives at all, in ms (the dedup retention)
-- ARGV[2]  how long an invalidated key's fill lease is held, in ms (redis.fill_hold_ms:
--          set to a hold, "hold:" (schema.keys.LEASE_HOLD) and a value of its own, so that
--          readers fill only while that hold lasts, take_lease.lua; 0: the lease is UNLINKed)
-- ARGV[2i + 1], ARGV[2i + 2]  how many cache keys, then lease keys, follow id i's record key
-- Records are dedup_claim.lua's. A new id or an expired claim is applied now: its leases
-- held (or UNLINKed) and its keys UNLINKed, and its record marked done ("d <now_ms>", as
-- dedup_confirm.lua marks it);
-- a done id is a duplicate and its keys are left alone; a live claim (another consumer's:
-- this call claims nothing it could find again) is busy and nothing of it changes. A script
-- runs atomically, so no other consumer sees a claim without its invalidation, and no
-- crash can leave one. Returns one of 'owned' (applied and confirmed), 'done', 'busy' per
-- id, then how many of the cache keys (not leases) existed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local done = 'd ' .. now
local out = {}
local removed = 0
local k = 1
local hold = tonumber(ARGV[2])
local held = 'hold:' .. t[1] .. '.' .. t[2] .. ':'     -- this call's holds, one per id
for i = 1, (#ARGV - 2) / 2 do
  local key = KEYS[k]
  local keys = tonumber(ARGV[2 * i + 1])
  local leases = tonumber(ARGV[2 * i + 2])
  local state = 'owned'
  local record = redis.call('GET', key)
  if record then
    if string.sub(record, 1, 1) == 'd' then
      state = 'done'
    elseif tonumber(string.match(record, '^c %S+ (%d+)$')) >= now then
      state = 'busy'
    end
  end
  if state == 'owned' then
    for j = k + keys + 1, k + keys + leases do
      if hold > 0 then
        redis.call('SET', KEYS[j], held .. i, 'PX', hold)
      else
        redis.call('UNLINK', KEYS[j])
      end
    end
    for j = k + 1, k + keys do
      removed = removed + redis.call('UNLINK', KEYS[j])
    end
    redis.call('SET', key, done, 'PX', ARGV[1])
  end
  out[i] = state
  k = k + 1 + keys + leases
end
out[#out + 1] = removed
return out
