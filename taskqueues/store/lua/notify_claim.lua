-- notify_claim: take up to n due notifications for one sender, each under a lease: its queue score becomes
-- the lease's end, so a sender that dies (kill -9) before it settles leaves it due again then, and no other
-- sender takes it before. Each claim counts an attempt and carries a token ("<sender>#<attempt>") that
-- notify_settle.lua requires: a sender whose lease ran out cannot settle what another one claimed since.
-- KEYS[1]  notify queue zset   KEYS[2] notify hash
-- ARGV[1]  key base   ARGV[2] now   ARGV[3] lease (seconds)   ARGV[4] at most this many   ARGV[5] sender id
-- Returns  {request, url, attempt, token, ...}
SCRIPT = 'notify_claim'
local base = check_base({'notifyq', 'notify'})
check_count(5, true)
local now = argv_number(2, 'now', 0, MAX_TIME)
local lease = argv_number(3, 'lease', 0, MAX_TIME)
local n = argv_number(4, 'count', 1, 1000, true)
local sender = argv_text(5, 'sender', '^[^#%s%c]+$', 200)
if PROBLEM then return refused() end
local out = {}
for _, request in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, n)) do
  local ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[2], request) or '')
  if not ok or not is_object(rec) or type(rec.url) ~= 'string' then
    redis.call('ZREM', KEYS[1], request) -- nothing to send: no record, or one that cannot be read
  else
    rec.attempts = (tonumber(rec.attempts) or 0) + 1
    rec.token = sender .. '#' .. rec.attempts
    rec.state = 'sending'
    rec.at = now
    redis.call('HSET', KEYS[2], request, cjson.encode(rec))
    redis.call('ZADD', KEYS[1], now + lease, request)
    out[#out + 1] = request
    out[#out + 1] = rec.url
    out[#out + 1] = tostring(rec.attempts)
    out[#out + 1] = rec.token
  end
end
return out
