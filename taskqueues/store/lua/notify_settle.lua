-- notify_settle: the sender that claimed a notification says how its call went: sent (the webhook answered
-- 2xx), or failed with an error, to be tried again at a given time or never (attempts used up). Only the
-- holder of the current claim's token may settle it; a stale sender changes nothing.
-- KEYS[1]  notify queue zset   KEYS[2] notify hash
-- ARGV[1]  key base   ARGV[2] request id   ARGV[3] token   ARGV[4] now
-- ARGV[5]  '' when sent, else the error   ARGV[6] when to try again ('' : never, it failed for good)
-- Returns  {'sent'} | {'retry'} | {'failed'} | {'stale'} (not this claim's token: another sender holds it)
SCRIPT = 'notify_settle'
local base = check_base({'notifyq', 'notify'})
check_count(6, true)
local request = argv_text(2, 'request id', PATTERN.request, 64)
local token = argv_text(3, 'token', '^%S+$', 256)
local now = argv_number(4, 'now', 0, MAX_TIME)
local err = argv_text(5, 'error', nil, 1000)
local again = ARGV[6] ~= '' and argv_number(6, 'retry at', 0, MAX_TIME) or nil
if PROBLEM then return refused() end
local ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[2], request) or '')
if not ok or not is_object(rec) or rec.token ~= token then return {'stale'} end
rec.token, rec.at = nil, now
local state
if err == '' then
  state, rec.sent = 'sent', now
  redis.call('ZREM', KEYS[1], request)
else
  rec.error = err
  if again then
    state, rec.next = 'retry', again
    redis.call('ZADD', KEYS[1], again, request)
  else
    state, rec.next = 'failed', nil
    redis.call('ZREM', KEYS[1], request)
  end
end
rec.state = state
redis.call('HSET', KEYS[2], request, cjson.encode(rec))
return {state}
