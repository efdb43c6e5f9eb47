-- notify_ready: a request with a webhook has ended (every job in a final state, as its caller found): its
-- notification becomes due now, once. Whoever moves it out of the watch set first makes it due; a second
-- caller (two workers noticed the same end) finds it gone and changes nothing.
-- KEYS[1]  notify watch zset (request id -> submission time: requests with a webhook not seen ended yet)
-- KEYS[2]  notify hash (request id -> notification record JSON: taskqueues/store/notices.py)
-- KEYS[3]  notify queue zset (request id -> when it is due, or until when its claim holds)
-- KEYS[4]  requests hash
-- ARGV[1]  key base   ARGV[2] request id   ARGV[3] now
-- Returns  {'due'} | {'gone'} (not watched: made due already, or never had a webhook) | {'forgotten'} (no
--          request record any more: dropped from the watch set)
SCRIPT = 'notify_ready'
local base = check_base({'notifywatch', 'notify', 'notifyq', 'requests'})
check_count(3, true)
local request = argv_text(2, 'request id', PATTERN.request, 64)
local now = argv_number(3, 'now', 0, MAX_TIME)
if PROBLEM then return refused() end
if redis.call('ZREM', KEYS[1], request) == 0 then return {'gone'} end
local ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[4], request) or '')
if not ok or not is_object(rec) or type(rec.notify) ~= 'string' then return {'forgotten'} end
redis.call('HSET', KEYS[2], request, cjson.encode({url = rec.notify, state = 'due', attempts = 0, ended = now}))
redis.call('ZADD', KEYS[3], now, request)
return {'due'}
