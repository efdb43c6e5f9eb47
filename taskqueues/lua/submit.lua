-- submit: store many jobs in one atomic step; a waiting job enters its task queue, a blocked one waits
-- for its dependencies (records carry dn = dependents, nd = unfinished dependencies).
-- KEYS[1]  jobs hash            (job id -> record JSON)
-- KEYS[2]  seq string           (job id counter)
-- KEYS[3]  tqdefs hash          (task-queue id -> canonical requirements)
-- KEYS[4]  tqempty zset         (task-queue id -> time it became empty)
-- KEYS[5]  poolstamp zset       (task-queue id -> time its SubmitPool was computed)
-- KEYS[6]  releasing zset
-- KEYS[7]  requests hash        (request id -> record JSON)
-- KEYS[8..] task-queue zsets, SubmitPool sets, queue-heads zsets, byrule sets, the work counter,
--           the heads and qfloor hashes
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  now (unix seconds)
-- ARGV[3]  JSON {"tqs": {tq: {"def": str, "queues": [queue...]}}, "jobs": [record...],
--                "request": {"id": str, "rec": {...}} (optional)}; a record carries t (task queue),
--          m_tail (":cpu:mem:tmp:need"), sc (score, a string), s (waiting | blocked | failed | dep-failed),
--          dl / dpl (indexes into "jobs" of its dependents / dependencies, resolved to ids as dn / dp)
-- Returns  {'ok', id...} in the order of the jobs, or {'needkeys', key...}
local base, now = ARGV[1], ARGV[2]
local payload = cjson.decode(ARGV[3])
declare_from(8)
local pools = {}
need(base .. 'work')
need_heads(base)
for _, rec in ipairs(payload.jobs) do
  if rec.ru then need(base .. 'byrule:' .. rec.ru) end
end
for tq, def in pairs(payload.tqs) do
  local queues = pool_of(base, tq)
  if #queues == 0 then
    queues = def.queues
    for _, q in ipairs(queues) do need(base .. 'qh:' .. q) end
  end
  pools[tq] = queues
end
local missing = needkeys()
if missing then return missing end

for tq, def in pairs(payload.tqs) do ensure_pool(base, KEYS[3], KEYS[5], tq, def.def, pools[tq], now) end
local ids = {'ok'}
for _, rec in ipairs(payload.jobs) do
  rec.id = tostring(redis.call('INCR', KEYS[2]))
  if rec.m_tail then rec.m = rec.id .. rec.m_tail end
  rec.m_tail = nil
  if rec.s == 'waiting' or rec.s == 'blocked' then add_work(base, work_of(rec)) end
  ids[#ids + 1] = rec.id
end
local function resolve(indexes)
  local out = {}
  for _, i in ipairs(indexes) do out[#out + 1] = payload.jobs[i + 1].id end
  return out
end
local request = payload.request
for _, rec in ipairs(payload.jobs) do
  if rec.dl then rec.dn, rec.dl = resolve(rec.dl), nil end
  if rec.dpl then rec.dp, rec.dpl = resolve(rec.dpl), nil end
  if request then rec.q = request.id end
  if rec.s == 'waiting' then enqueue(base, KEYS[4], KEYS[6], rec, pools[rec.t], now) end
  if rec.ru and (rec.s == 'waiting' or rec.s == 'blocked') then
    redis.call('SADD', base .. 'byrule:' .. rec.ru, rec.id)
  end
  save(KEYS[1], rec)
end
if request then
  request.rec.first, request.rec.last = ids[2], ids[#ids]
  redis.call('HSET', KEYS[7], request.id, cjson.encode(request.rec))
end
sync_heads(base)
wake(base)
return ids
