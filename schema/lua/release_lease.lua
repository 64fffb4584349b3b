-- Give back a fill lease that its reader will not use (cachesync.client.read_through,
-- when its ``fresh`` check says the loader's replica lags): other readers may fill again.
-- KEYS[1]  the lease key
-- ARGV[1]  the reader's token
-- Returns 1 if the lease was still this reader's and is deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
