-- Confirm claims in the Redis dedup store: "c <token> ..." -> "d <now_ms>".
-- KEYS     record keys; ARGV[1] the claim token; ARGV[2] the retention in ms.
-- Only records still claimed under this token change: a claim that expired and
-- was taken over by another consumer is not ours to mark. Returns how many changed.
-- One SET XX GET per id marks it done and returns what it replaced; in the rare
-- case that was not our claim, the record it replaced is put back. A script runs
-- atomically, so nobody sees the record in between.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = 'c ' .. ARGV[1] .. ' '
local done = 'd ' .. now
local n = 0
for _, key in ipairs(KEYS) do
  local record = redis.call('SET', key, done, 'PX', ARGV[2], 'XX', 'GET')
  if record and string.sub(record, 1, #prefix) == prefix then
    n = n + 1
  elseif record then
    redis.call('SET', key, record, 'PX', ARGV[2])
  end
end
return n
