-- release: a job in the releasing set (its deferred requirements are now evaluated, or its task queue
-- needed a fresh SubmitPool) enters its task queue, or fails with the reason its evaluation gave.
-- KEYS[1]  jobs hash
-- KEYS[2]  tqdefs hash
-- KEYS[3]  tqempty zset
-- KEYS[4]  poolstamp zset
-- KEYS[5]  releasing zset
-- KEYS[6..] the work counter, the heads and qfloor hashes, the task queue, its pool and the heads
--           indexes of its queues
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] now
-- ARGV[4]  JSON {"t": tq, "def": canonical, "queues": [...], "m_tail": ":cpu:mem:tmp:need",
--          "r"/"rn": requirements as records.stored_requirements gives them (each optional),
--          "e": ete, "sc": score (optional), "c": command (optional)} or {"error": reason}
-- Returns  {'ok', state} | {'final', state} | {'needkeys', key...}
local base, id, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
declare_from(6)
local rec = load(KEYS[1], id)
if not rec or rec.s ~= 'releasing' then return {'final', rec and rec.s or 'unknown'} end
local arg = cjson.decode(ARGV[4])
if arg.error then
  redis.call('ZREM', KEYS[5], id)
  finish(KEYS[1], KEYS[5], rec, 'failed', arg.error, now)
  return {'ok', 'failed'}
end
need(base .. 'work')
need_heads(base)
local queues = pool_of(base, arg.t)
if #queues == 0 then
  queues = arg.queues
  for _, q in ipairs(queues) do need(base .. 'qh:' .. q) end
end
local missing = needkeys()
if missing then return missing end
ensure_pool(base, KEYS[2], KEYS[4], arg.t, arg.def, queues, now)
redis.call('ZREM', KEYS[5], id)
add_work(base, -work_of(rec))
rec.t, rec.m, rec.r, rec.rn, rec.e, rec.dx = arg.t, id .. arg.m_tail, arg.r, arg.rn, arg.e, nil
add_work(base, work_of(rec))
if arg.sc then rec.sc = arg.sc end
if arg.c then rec.c = arg.c end
enqueue(base, KEYS[3], KEYS[5], rec, queues, now)
save(KEYS[1], rec)
sync_heads(base)
wake(base)
return {'ok', rec.s}
