-- renew: extend a periodic task's lock only if we still hold it (compare-and-expire), for runs that may
-- outlast the lock's time to live.
-- KEYS[1]  lock key "<prefix>:{<vo>}:lock:<name>" (string: the holder's token, with an expiry)
-- ARGV[1]  our token
-- ARGV[2]  new time to live (milliseconds, a whole number > 0: PEXPIRE with 0 or less would delete the lock)
-- Returns  1 if the lock was ours and now lives ARGV[2] ms more, 0 if it was lost
SCRIPT = 'renew'
if #KEYS ~= 1 then problem('KEYS', 'wants the lock key alone, got ' .. #KEYS .. ' keys') end
if type(KEYS[1]) ~= 'string' or not string.match(KEYS[1], '^[^{}:%s]+:{[^{}:%s]+}:lock:.') then
  problem('KEYS[1]', 'wants a lock key "<prefix>:{<vo>}:lock:<name>", got ' .. shown(KEYS[1]))
end
check_count(2, true)
argv_text(1, 'token', '^%S+$', 256)
local ttl = argv_number(2, 'time to live', 1, MAX_TIME * 1000, true)
if PROBLEM then return refused() end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl))
end
return 0
