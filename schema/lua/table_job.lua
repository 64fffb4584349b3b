-- One scan per table-level event (consumer.adapters.redis_table_jobs.RedisTableJobs).
-- KEYS[1]  cachesync:tablejob:<ns>:<job id>  (the same for every partition copy of the event)
-- ARGV[1]  'begin' | 'renew' | 'finish'
-- ARGV[2]  the owner (one consumer process)
-- ARGV[3]  begin, renew: the lease in ms; finish: keys removed
-- ARGV[4]  how long the record lives at all, in ms (the dedup retention)
-- A record is "r <owner> <until_ms>" while a scan runs, "d <removed>" once it completed.
-- begin returns {'run', 0} (the scan is ours: none yet, ours, or its owner's lease ran out),
-- {'wait', 0} (another owner's scan is under way) or {'done', removed}. renew returns 1 while
-- the scan is still ours. finish returns 1. The clock is Redis's own.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local record = redis.call('GET', KEYS[1])
if ARGV[1] == 'finish' then
  redis.call('SET', KEYS[1], 'd ' .. ARGV[3], 'PX', ARGV[4])
  return 1
end
local owner, untl
if record then
  if string.sub(record, 1, 1) == 'd' then
    if ARGV[1] == 'begin' then return {'done', tonumber(string.sub(record, 3))} end
    return 0
  end
  owner, untl = string.match(record, '^r (%S+) (%d+)$')
end
local mine = 'r ' .. ARGV[2] .. ' ' .. (now + tonumber(ARGV[3]))
if ARGV[1] == 'renew' then
  if owner ~= ARGV[2] then return 0 end
  redis.call('SET', KEYS[1], mine, 'KEEPTTL')
  return 1
end
if owner and owner ~= ARGV[2] and tonumber(untl) >= now then return {'wait', 0} end
redis.call('SET', KEYS[1], mine, 'PX', ARGV[4])
return {'run', 0}
