-- Batched claim for the Redis dedup store (consumer.adapters.redis_dedup).
-- KEYS     one record key per message id
-- ARGV[1]  the claim token
-- ARGV[2]  the lease in ms
-- ARGV[3]  how long a record lives at all, in ms (the dedup retention)
-- A record is "c <token> <until_ms>" (claimed) or "d <done_ms>" (done). New ids
-- and expired claims become ours; done ids are duplicates; live claims of another
-- token are busy. Returns one of 'owned', 'done', 'busy' per key. The clock is
-- Redis's own, so consumers on different hosts agree on lease expiry. A new id
-- (the common case) costs one SET NX; only an existing record is read.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = 'c ' .. ARGV[1] .. ' ' .. (now + tonumber(ARGV[2]))
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, mine, 'PX', ARGV[3], 'NX') then
    out[i] = 'owned'
  else
    local record = redis.call('GET', key)
    if string.sub(record, 1, 1) == 'd' then
      out[i] = 'done'
    else
      local owner, untl = string.match(record, '^c (%S+) (%d+)$')
      if owner == ARGV[1] then
        out[i] = 'owned'
      elseif tonumber(untl) < now then
        redis.call('SET', key, mine, 'PX', ARGV[3])
        out[i] = 'owned'
      else
        out[i] = 'busy'
      end
    end
  end
end
return out
