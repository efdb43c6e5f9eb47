-- floor_lease (benchmark only, scripts/bench_floor.py): the fewest commands an atomic lease of the most
-- urgent jobs of one task queue needs, with no walk, no eligibility and no fit check: what no match
-- script can beat. Takes the jobs, sets the queue's next head in the heads hash and index, marks the
-- records leased and adds the leases: the writes match.lua makes, in the same form.
-- KEYS[1]  the task-queue zset     KEYS[2]  heads hash     KEYS[3]  heads index of its catalog queue
-- KEYS[4]  jobs hash               KEYS[5]  leases zset
-- ARGV: match.lua's (ARGV[2] pilot, ARGV[3] now, ARGV[4] lease seconds, ARGV[9] how many jobs); ARGV[12] the
-- task-queue id
-- Returns {id1, record1, ...} as match.lua does
local tq = ARGV[12]
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[9])
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head > 0 then
  redis.call('HSET', KEYS[2], tq, head[2] .. ' ' .. head[1] .. ' 0:0:0:0')
  redis.call('ZADD', KEYS[3], head[2], tq)
end
if #popped == 0 then return {} end
local expiry = string.format('%.17g', tonumber(ARGV[3]) + tonumber(ARGV[4]))
local lease = ',"pl":' .. cjson.encode(ARGV[2]) .. ',"tm":' .. ARGV[3] .. '}'
local ids, ex = {}, {}
for i = 1, #popped, 2 do
  local id = string.match(popped[i], '^[^:]+')
  ids[#ids + 1] = id
  ex[#ex + 1] = expiry ex[#ex + 1] = id
end
local raws = redis.call('HMGET', KEYS[4], unpack(ids))
local out = {}
for i = 1, #ids do
  out[2 * i - 1] = ids[i]
  out[2 * i] = string.gsub(string.sub(raws[i], 1, -2), '"s":"waiting"', '"s":"matched"', 1) .. lease
end
redis.call('HSET', KEYS[4], unpack(out))
redis.call('ZADD', KEYS[5], unpack(ex))
return out
