-- unlock: release a periodic task's lock only if we still hold it (compare-and-delete).
-- A plain DEL would remove the lock of the next holder when ours expired while we were still working.
-- KEYS[1]  lock key (string: the holder's token, with an expiry)
-- ARGV[1]  our token
-- Returns  1 if the lock was ours and is now released, 0 if someone else holds it or it expired
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
