-- fail: a payload failed, was killed, or its pilot gives it back (preemption, SIGTERM).
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  kills hash
-- KEYS[4]  tqempty zset
-- KEYS[5]  releasing zset
-- KEYS[6..] the job's task queue, its pool and the pool's heads indexes (only needed to give it back)
--           the work counter, the heads and qfloor hashes
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] attempt   ARGV[4] pilot id   ARGV[5] now
-- ARGV[6]  result JSON {"x": exit, "w": wall s, "cpu": cpu s, "pm": peak MB, "why": reason}
-- ARGV[7]  "1" to give the job back to its task queue at once (counts as a retry), "0" to fail it
-- Returns  {'ok', final state} or {'stale', reason} or {'needkeys', key...}
local base, id, attempt, pilot, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
declare_from(6)
need(base .. 'work')
need_heads(base)
local rec = load(KEYS[1], id)
local bad = check_report(rec, id, attempt, {'matched', 'running'})
if bad then return {'stale', bad} end
if rec.pl ~= pilot then return {'stale', 'job ' .. id .. ' is leased to ' .. tostring(rec.pl)} end
local result = cjson.decode(ARGV[6])
local kill = redis.call('HGET', KEYS[3], id)
local retry = ARGV[7] == '1' and not kill and (rec.rt or 0) < rec.mr
local queues = {}
if retry then
  queues = pool_of(base, rec.t)
  local missing = needkeys()
  if missing then return missing end
end
for k, v in pairs(result) do rec[k] = v end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
if retry then
  rec.rt = (rec.rt or 0) + 1
  rec.pl = nil
  enqueue(base, KEYS[4], KEYS[5], rec, queues, now)
  save(KEYS[1], rec)
  sync_heads(base)
  wake(base)
  return {'ok', 'waiting'}
end
local reason = result.why or 'failed'
local state = 'failed'
if kill then
  if rec.cx then state = 'cancelled' end
  reason = kill
elseif ARGV[7] == '1' then
  reason = reason .. ' (gave up after ' .. tostring(rec.rt or 0) .. ' retries)'
end
finish(KEYS[1], KEYS[5], rec, state, reason, now)
wake(base)
return {'ok', state}
