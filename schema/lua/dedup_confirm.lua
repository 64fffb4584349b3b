-- Confirm claims in the Redis dedup store: "c <token> ..." -> "d <now_ms>".
-- KEYS     record keys; ARGV[1] the claim token; ARGV[2] the retention in ms.
-- Only records still claimed under this token change: a claim that expired and
-- was taken over by another consumer is not ours to mark. Returns how many changed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = 'c ' .. ARGV[1] .. ' '
local n = 0
for _, key in ipairs(KEYS) do
  local record = redis.call('GET', key)
  if record and string.sub(record, 1, #prefix) == prefix then
    redis.call('SET', key, 'd ' .. now, 'PX', ARGV[2])
    n = n + 1
  end
end
return n
