-- unlock: release a periodic task's lock only if we still hold it (compare-and-delete).
-- A plain DEL would remove the lock of the next holder when ours expired while we were still working.
-- KEYS[1]  lock key "<prefix>:{<vo>}:lock:<name>" (string: the holder's token, with an expiry)
-- ARGV[1]  our token
-- Returns  1 if the lock was ours and is now released, 0 if someone else holds it or it expired
SCRIPT = 'unlock'
if #KEYS ~= 1 then problem('KEYS', 'wants the lock key alone, got ' .. #KEYS .. ' keys') end
if type(KEYS[1]) ~= 'string' or not string.match(KEYS[1], '^[^{}:%s]+:{[^{}:%s]+}:lock:.') then
  problem('KEYS[1]', 'wants a lock key "<prefix>:{<vo>}:lock:<name>", got ' .. shown(KEYS[1]))
end
check_count(1, true)
argv_text(1, 'token', '^%S+$', 256)
if PROBLEM then return refused() end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
