-- release: a job in the releasing set (its deferred requirements are now evaluated, or its task queue
-- needed a fresh SubmitPool) enters its task queue, or fails with the reason its evaluation gave.
-- KEYS[1]  jobs hash
-- KEYS[2]  tqdefs hash
-- KEYS[3]  tqempty zset
-- KEYS[4]  poolstamp zset
-- KEYS[5]  releasing zset
-- KEYS[6..] the work counter, the heads, qfloor, tqempty and tqmax hashes, the task queue, its pool and
--           the heads indexes of its queues
--           and the stats hash, whose counters this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] now
-- ARGV[4]  JSON {"t": tq, "def": canonical, "queues": [...], "m_tail": ":cpu:mem:tmp:need",
--          "r"/"rn": requirements as records.stored_requirements gives them (each optional),
--          "e": ete, "sc": score (optional), "c": command (optional)} or {"error": reason}; nothing else
-- Returns  {'ok', state} | {'final', state} | {'needkeys', key...}
SCRIPT = 'release'
local base = check_base({'jobs', 'tqdefs', 'tqempty', 'poolstamp', 'releasing'})
check_count(4, true)
local id = argv_text(2, 'job id', PATTERN.job, 64)
local now = argv_number(3, 'now', 0, MAX_TIME)
local arg = check_json('ARGV[4] (release)', ARGV[4])
if arg.error ~= nil then
  check_fields('ARGV[4] (release)', arg, {error = 'text'})
else
  local SPEC = {t = 'tq', def = 'json', queues = 'array', m_tail = 'tail', r = 'json', rn = 'any', e = 'ete',
                sc = 'score', c = 'text'}
  if check_fields('ARGV[4] (release)', arg, SPEC, {'t', 'def', 'queues', 'm_tail', 'e'}) then
    for i, q in ipairs(arg.queues) do check_text('ARGV[4] (release).queues[' .. i .. ']', q, PATTERN.queue, 400) end
    if arg.rn ~= nil then check_text('ARGV[4] (release).rn', arg.rn, '^c?m?$') end
  end
end
if PROBLEM then return refused() end
declare_keys()
events_by(now, 'releaser')
local rec = load(KEYS[1], id)
if not rec or rec.s ~= 'releasing' then return {'final', rec and rec.s or 'unknown'} end
if arg.error then
  redis.call('ZREM', KEYS[5], id)
  finish(KEYS[1], KEYS[5], rec, 'failed', arg.error, now)
  return {'ok', 'failed'}
end
need(base .. K_WORK)
need_heads(base)
local queues = pool_of(base, arg.t)
if #queues == 0 then
  queues = arg.queues
  for _, q in ipairs(queues) do need(base .. K_QH .. q) end
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
sync_heads(base, now)
wake(base)
return {'ok', rec.s}
