-- fail: a payload failed, was killed, or its pilot gives it back (preemption, SIGTERM).
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  kills hash
-- KEYS[4]  tqempty zset
-- KEYS[5]  releasing zset
-- KEYS[6..] the job's task queue, its pool and the pool's heads indexes (only needed to give it back)
--           the work counter, the heads, qfloor, tqempty and tqmax hashes
--           and the stats hash, whose counters this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] attempt   ARGV[4] pilot id   ARGV[5] now
-- ARGV[6]  result JSON {"x": exit, "w": wall s, "cpu": cpu s, "pm": peak MB, "why": reason, "o": outputs,
--          "st": started} (those fields only: they are copied onto the record)
-- ARGV[7]  "1" to give the job back to its task queue at once (counts as a retry), "0" to fail it (unless
--          its exit code is one its retry policy names: ro, rm, rr below), "2" to give back a job its pilot
--          holds unstarted and no longer takes (a prefetched job when the pilot drains or stops): it never ran,
--          so it uses none of its retries (a job already started is given back as with "1")
-- A lease taken under a shares policy gives its cores back to the fair hash's counters (fair_end, _lib.lua).
-- A job the reaper requeued from this pilot's lease of this attempt, and nobody matched since (the store was
-- paused longer than the lease), is taken back first (_lib.lua's requeued_from): KEYS then also hold its task
-- queue and the delayed, releasing and parked keys (or the script answers needkeys).
-- Returns  {'ok', final state} or {'stale', reason} or {'needkeys', key...}
SCRIPT = 'fail'
local base = check_base({'jobs', 'leases', 'kills', 'tqempty', 'releasing'})
check_count(7, true)
local id = argv_text(2, 'job id', PATTERN.job, 64)
local attempt = argv_number(3, 'attempt', 0, 1e9, true)
local pilot = argv_text(4, 'pilot id', PATTERN.name, 256)
local now = argv_number(5, 'now', 0, MAX_TIME)
local result = check_json('ARGV[6] (result)', ARGV[6])
check_fields('ARGV[6] (result)', result, RESULT)
if ARGV[7] ~= '0' and ARGV[7] ~= '1' and ARGV[7] ~= '2' then
  problem('ARGV[7] (requeue)', 'wants 0, 1 or 2, got ' .. shown(ARGV[7]))
end
if PROBLEM then return refused() end
declare_keys()
events_by(now, 'pilot ' .. pilot)
need(base .. K_WORK)
need_heads(base)
local rec = load(KEYS[1], id)
-- Requeued by the reaper after the store paused longer than the lease, and matched by nobody since: this
-- pilot's report of that attempt takes it back (_lib.lua's requeued_from).
local bad, back = check_end_report(base, rec, id, attempt, pilot)
if bad then return {'stale', bad} end
local kill = redis.call('HGET', KEYS[3], id)
local unstarted = ARGV[7] == '2' and (back and rec.ls or rec.s) == 'matched'
local retry = ARGV[7] ~= '0' and not kill and (unstarted or ((rec.rt or 0) - (back and 1 or 0)) < rec.mr)
-- A failure whose exit code the job's retry policy names (the workflow's retry.on_exit) runs it again, as a
-- new attempt, up to rm times (rr counts them).
local auto = false
if ARGV[7] == '0' and not kill and type(result.x) == 'number' and type(rec.ro) == 'table'
    and (tonumber(rec.rr) or 0) < (tonumber(rec.rm) or 0) then
  for _, code in ipairs(rec.ro) do if code == result.x then auto = true end end
end
local queues = {}
if retry or auto then queues = pool_of(base, rec.t) end
if retry or back or auto then
  local missing = needkeys()
  if missing then return missing end
end
if back then take_back(base, rec, pilot) end
for k, v in pairs(result) do rec[k] = v end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
fair_end(base, rec, now)
if retry or auto then
  if auto then
    rec.rr = (tonumber(rec.rr) or 0) + 1
    rec.why = 'exit ' .. tostring(result.x) .. ': automatic retry ' .. rec.rr .. ' of ' .. tostring(rec.rm)
      .. ' (retry.on_exit)'
  elseif not unstarted then
    rec.rt = (rec.rt or 0) + 1
  end
  rec.pl, rec.lx, rec.ls = nil, nil, nil -- given back, not requeued by the reaper: nobody takes it back
  count(base, 'retries', 1)
  enqueue(base, KEYS[4], KEYS[5], rec, queues, now)
  save(KEYS[1], rec)
  sync_heads(base, now)
  wake(base)
  return {'ok', 'waiting'}
end
local reason = result.why or 'failed'
local state = 'failed'
if kill then
  if rec.cx then state = 'cancelled' end
  reason = kill
elseif ARGV[7] ~= '0' then
  reason = reason .. ' (gave up after ' .. tostring(rec.rt or 0) .. ' retries)'
end
finish(KEYS[1], KEYS[5], rec, state, reason, now)
sync_heads(base, now)
wake(base)
return {'ok', state}
