-- notify: request-end notifications (taskqueues/store/notices.py): three operations of one function, named by
-- ARGV[2]. Self-contained, without _lib: each function of the library carries its own copy of the helpers it
-- uses, and the library's size shows in every call's garbage collection (three functions with _lib made the
-- match 2.5% dearer: scripts/count_match.py).
-- KEYS[1]  notify watch zset (request id -> submission time: requests with a webhook not seen ended yet)
-- KEYS[2]  notify hash (request id -> notification record JSON)
-- KEYS[3]  notify queue zset (request id -> when it is due, or until when a sender's claim holds it)
-- KEYS[4]  requests hash
-- KEYS[5..] further keys of the same community (the store declares a few for every script)
-- ARGV[1]  key base "<prefix>:{<vo>}:"   ARGV[2] the operation:
--   ready   ARGV[3] request id, ARGV[4] now: the request has ended (its caller found every job in a final
--           state): its notification becomes due, once. Whoever moves it out of the watch set first does it;
--           a second caller finds it gone and changes nothing. Its `ends` counts the request's ends: one more
--           than its record had (resubmit.lua keeps it there while the request runs again), else 1.
--           Returns {'due'} | {'gone'} (not watched) | {'forgotten'} (no request record: dropped from the set)
--   claim   ARGV[3] now, ARGV[4] lease (seconds), ARGV[5] at most this many, ARGV[6] sender id: take due
--           notifications, each under a lease (its queue score becomes the lease's end: a sender that dies
--           leaves it due again then, and no other sender takes it before). Each claim counts an attempt and
--           carries a token "<sender>#<attempt>" that settle requires.
--           Returns {request, url, attempt, token, end, ...} (end: which end of the request it tells)
--   settle  ARGV[3] request id, ARGV[4] token, ARGV[5] now, ARGV[6] '' when sent, else the error, ARGV[7]
--           when to try again ('': never, it failed for good): only the holder of the current claim settles.
--           Returns {'sent'} | {'retry'} | {'failed'} | {'stale'} (not this claim's token: nothing changed)
local ROLES = {'notifywatch', 'notify', 'notifyq', 'requests'}
local REQUEST_ID = '^[%w_.%-]+$'
local function refuse(where, what) return redis.error_reply('notify: ' .. where .. ': ' .. what) end
local function text_arg(i, what, pattern, max)
  local v = ARGV[i]
  if type(v) ~= 'string' or #v > max or (pattern and not string.match(v, pattern)) then
    return nil, refuse('ARGV[' .. i .. '] (' .. what .. ')', 'wants text' .. (pattern and ' matching ' .. pattern or '')
      .. ' of at most ' .. max .. ' bytes')
  end
  return v
end
local function number_arg(i, what, lo, hi, int)
  local n = tonumber(ARGV[i])
  if not n or not (n >= lo and n <= hi) or (int and n ~= math.floor(n)) then
    return nil, refuse('ARGV[' .. i .. '] (' .. what .. ')', 'wants a number in [' .. lo .. ', ' .. hi .. ']')
  end
  return n
end
local function decoded(raw)
  local ok, rec = pcall(cjson.decode, raw or '')
  if ok and type(rec) == 'table' then return rec end
  return nil
end

local base = ARGV[1]
if type(base) ~= 'string' or not string.match(base, '^[^{}:%s]+:{[^{}:%s]+}:$') then
  return refuse('ARGV[1] (key base)', 'wants "<prefix>:{<vo>}:"')
end
for i = 1, #KEYS do
  local want = ROLES[i] and base .. ROLES[i]
  if (want and KEYS[i] ~= want) or string.sub(KEYS[i], 1, #base) ~= base then
    return refuse('KEYS[' .. i .. ']', 'wants ' .. (want or 'a key of ' .. base))
  end
end
if #KEYS < #ROLES then return refuse('KEYS', 'wants at least ' .. #ROLES .. ' keys') end
local op, counts = ARGV[2], {ready = 4, claim = 6, settle = 7}
if not counts[op] then return refuse('ARGV[2] (operation)', 'wants ready, claim or settle') end
if #ARGV ~= counts[op] then return refuse('ARGV', op .. ' wants ' .. counts[op] .. ' arguments, got ' .. #ARGV) end
local MAX_TIME = 1e12

if op == 'ready' then
  local request, bad = text_arg(3, 'request id', REQUEST_ID, 64)
  if bad then return bad end
  local now, bad2 = number_arg(4, 'now', 0, MAX_TIME)
  if bad2 then return bad2 end
  if redis.call('ZREM', KEYS[1], request) == 0 then return {'gone'} end
  local rec = decoded(redis.call('HGET', KEYS[4], request))
  if not rec or type(rec.notify) ~= 'string' then return {'forgotten'} end
  local before = decoded(redis.call('HGET', KEYS[2], request))
  local ends = (before and (tonumber(before.ends) or 1) or 0) + 1
  redis.call('HSET', KEYS[2], request, cjson.encode({url = rec.notify, state = 'due', attempts = 0, ended = now,
    ends = ends}))
  redis.call('ZADD', KEYS[3], now, request)
  return {'due'}
end

if op == 'claim' then
  local now, bad = number_arg(3, 'now', 0, MAX_TIME)
  if bad then return bad end
  local lease, bad2 = number_arg(4, 'lease', 0, MAX_TIME)
  if bad2 then return bad2 end
  local n, bad3 = number_arg(5, 'count', 1, 1000, true)
  if bad3 then return bad3 end
  local sender, bad4 = text_arg(6, 'sender', '^[^#%s%c]+$', 200)
  if bad4 then return bad4 end
  local out = {}
  for _, request in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, n)) do
    local rec = decoded(redis.call('HGET', KEYS[2], request))
    if not rec or type(rec.url) ~= 'string' then
      redis.call('ZREM', KEYS[3], request) -- nothing to send: no record, or one that cannot be read
    else
      rec.attempts = (tonumber(rec.attempts) or 0) + 1
      rec.token = sender .. '#' .. string.format('%d', rec.attempts)
      rec.state, rec.at = 'sending', now
      redis.call('HSET', KEYS[2], request, cjson.encode(rec))
      redis.call('ZADD', KEYS[3], now + lease, request)
      out[#out + 1] = request
      out[#out + 1] = rec.url
      out[#out + 1] = string.format('%d', rec.attempts)
      out[#out + 1] = rec.token
      out[#out + 1] = string.format('%d', tonumber(rec.ends) or 1)
    end
  end
  return out
end

-- settle
local request, bad = text_arg(3, 'request id', REQUEST_ID, 64)
if bad then return bad end
local token, bad2 = text_arg(4, 'token', '^%S+$', 256)
if bad2 then return bad2 end
local now, bad3 = number_arg(5, 'now', 0, MAX_TIME)
if bad3 then return bad3 end
local err, bad4 = text_arg(6, 'error', nil, 1000)
if bad4 then return bad4 end
local again = nil
if ARGV[7] ~= '' then
  local at, bad5 = number_arg(7, 'retry at', 0, MAX_TIME)
  if bad5 then return bad5 end
  again = at
end
local rec = decoded(redis.call('HGET', KEYS[2], request))
if not rec or rec.token ~= token then return {'stale'} end
rec.token, rec.at = nil, now
if err == '' then
  rec.state, rec.sent = 'sent', now
  redis.call('ZREM', KEYS[3], request)
elseif again then
  rec.state, rec.error, rec.next = 'retry', err, again
  redis.call('ZADD', KEYS[3], again, request)
else
  rec.state, rec.error, rec.next = 'failed', err, nil
  redis.call('ZREM', KEYS[3], request)
end
redis.call('HSET', KEYS[2], request, cjson.encode(rec))
return {rec.state}
