-- submit: store many jobs in one atomic step; a waiting job enters its task queue, a blocked one waits
-- for its dependencies (records carry dn = dependents, nd = unfinished dependencies).
-- KEYS[1]  jobs hash            (job id -> record JSON)
-- KEYS[2]  seq string           (job id counter)
-- KEYS[3]  tqdefs hash          (task-queue id -> canonical requirements)
-- KEYS[4]  tqempty zset         (task-queue id -> time it became empty)
-- KEYS[5]  poolstamp zset       (task-queue id -> time its SubmitPool was computed)
-- KEYS[6]  releasing zset
-- KEYS[7..] task-queue zsets, SubmitPool sets and queue-heads zsets this call touches
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  now (unix seconds)
-- ARGV[3]  JSON {"tqs": {tq: {"def": str, "queues": [queue...]}}, "jobs": [record...]}; a record carries
--          t (task queue), m_tail (":cpu:mem:tmp:ete"), sc (score, a string), s (waiting | blocked),
--          and dl (indexes into "jobs" of its dependents, resolved to ids here as dn)
-- Returns  {'ok', id...} in the order of the jobs, or {'needkeys', key...}
local base, now = ARGV[1], ARGV[2]
local payload = cjson.decode(ARGV[3])
declare_from(7)
local pools = {}
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
  rec.m = rec.id .. rec.m_tail
  rec.m_tail = nil
  ids[#ids + 1] = rec.id
end
for _, rec in ipairs(payload.jobs) do
  if rec.dl then
    rec.dn = {}
    for _, i in ipairs(rec.dl) do rec.dn[#rec.dn + 1] = payload.jobs[i + 1].id end
    rec.dl = nil
  end
  if rec.s == 'waiting' then enqueue(base, KEYS[4], KEYS[6], rec, pools[rec.t], now) end
  save(KEYS[1], rec)
end
return ids
