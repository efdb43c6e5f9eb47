-- renew: extend a periodic task's lock only if we still hold it (compare-and-expire), for runs that may
-- outlast the lock's time to live.
-- KEYS[1]  lock key (string: the holder's token, with an expiry)
-- ARGV[1]  our token
-- ARGV[2]  new time to live (milliseconds)
-- Returns  1 if the lock was ours and now lives ARGV[2] ms more, 0 if it was lost
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
