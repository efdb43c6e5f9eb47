-- _lib: helpers prepended to every script at load time (not a script of its own).
-- Every key a script touches is declared in KEYS. Keys that depend on data (a task queue, its SubmitPool,
-- the heads index of each eligible queue) are declared by the caller; when a script finds one it was not
-- given, it returns {'needkeys', key...} before writing anything and the caller retries with them.
local EMPTY = 1e18
local ENQUEUED = false
local DECLARED = {}
local MISSING = {}
local function declare_from(i)
  for j = i, #KEYS do DECLARED[KEYS[j]] = true end
end
local function need(k)
  if not DECLARED[k] then MISSING[#MISSING + 1] = k end
  return k
end
local function needkeys()
  if #MISSING == 0 then return nil end
  table.insert(MISSING, 1, 'needkeys')
  return MISSING
end
-- The queues of a task queue's SubmitPool; declares the task queue, its pool and their heads indexes.
local function pool_of(base, tq)
  need(base .. 't:' .. tq)
  local poolkey = base .. 'pool:' .. tq
  if not DECLARED[poolkey] then need(poolkey) return {} end
  local queues = redis.call('SMEMBERS', poolkey)
  for _, q in ipairs(queues) do need(base .. 'qh:' .. q) end
  return queues
end
-- Outstanding work (core-seconds of every unfinished job with a known shape), what a load-aware ETA
-- divides by the cores (matcher.eta). A job counts from the moment it has a task-queue member.
-- Whole seconds with INCRBY: INCRBYFLOAT rewrites its arguments for replication, which in Redis 6.2
-- corrupts the scripting client's argument cache (the server crashed on the next SADD).
local function work_of(rec)
  if not rec.m then return 0 end
  local cpu = tonumber(string.match(rec.m, '^[^:]+:([^:]+):')) or 1
  return cpu * math.ceil(tonumber(rec.e) or 0)
end
local function add_work(base, amount)
  if amount ~= 0 then redis.call('INCRBY', base .. 'work', amount) end
end
-- Put a waiting job into its task queue. The heads index only ever gets ZADD LT here, so every entry
-- stays at or below its task queue's real head score (what match relies on). A task queue with no
-- SubmitPool (cleaned meanwhile, or no queue eligible any more) sends the job to the releasing set,
-- where the caller recomputes its pool from the catalog (release.lua).
local function enqueue(base, tqempty, releasing, rec, queues, now)
  if #queues == 0 then
    rec.s = 'releasing'
    redis.call('ZADD', releasing, now, rec.id)
    return
  end
  rec.s = 'waiting'
  ENQUEUED = true
  redis.call('ZADD', base .. 't:' .. rec.t, rec.sc, rec.m)
  redis.call('ZREM', tqempty, rec.t)
  for _, q in ipairs(queues) do redis.call('ZADD', base .. 'qh:' .. q, 'LT', rec.sc, rec.t) end
end
-- Records are stored without their id (the hash field) and with only the tail of their task-queue
-- member (":cpu:mem:tmp:ete"): memory per waiting job is a target. load/save put them back and take
-- them out, so scripts always see rec.id and rec.m.
local function load(jobs, id)
  local raw = redis.call('HGET', jobs, id)
  if not raw then return nil end
  local rec = cjson.decode(raw)
  rec.id = id
  if rec.mt then rec.m, rec.mt = id .. rec.mt, nil end
  return rec
end
local function save(jobs, rec)
  local id, m = rec.id, rec.m
  rec.id = nil
  if m then rec.mt, rec.m = string.sub(m, #id + 1), nil end
  redis.call('HSET', jobs, id, cjson.encode(rec))
  rec.id, rec.m, rec.mt = id, m, nil
end
-- A report from a pilot must name the job's current attempt and find the job in one of `states`.
local function check_report(rec, id, attempt, states)
  if not rec then return 'unknown job ' .. id end
  if tostring(rec.a) ~= tostring(attempt) then
    return 'stale attempt ' .. attempt .. ' for job ' .. id .. ' (current ' .. rec.a .. ', state ' .. rec.s .. ')'
  end
  for _, s in ipairs(states) do if rec.s == s then return nil end end
  return 'job ' .. id .. ' is ' .. rec.s
end
-- End a job for good (failed, cancelled...) and mark every job that transitively depends on it
-- dep-failed with the reason. Only blocked or releasing dependents can exist below an unfinished job.
local function finish(jobs, releasing, rec, state, reason, now)
  add_work(string.match(jobs, '^(.*)jobs$'), -work_of(rec))
  rec.s = state
  rec.why = reason
  rec.te = now
  save(jobs, rec)
  local stack = {}
  for _, d in ipairs(rec.dn or {}) do stack[#stack + 1] = {d, rec.id} end
  while #stack > 0 do
    local top = table.remove(stack)
    local drec = load(jobs, top[1])
    if drec and (drec.s == 'blocked' or drec.s == 'releasing') then
      add_work(string.match(jobs, '^(.*)jobs$'), -work_of(drec))
      drec.s = 'dep-failed'
      drec.why = 'dependency ' .. top[2] .. ' ' .. state .. ': ' .. reason
      drec.te = now
      save(jobs, drec)
      redis.call('ZREM', releasing, drec.id)
      for _, d in ipairs(drec.dn or {}) do stack[#stack + 1] = {d, drec.id} end
    end
  end
end
-- Create a task queue's definition and SubmitPool when they do not exist yet, registering the task queue
-- (as empty) in the heads index of every eligible queue.
local function ensure_pool(base, tqdefs, poolstamp, tq, def, queues, now)
  redis.call('HSETNX', tqdefs, tq, def)
  local poolkey = base .. 'pool:' .. tq
  if redis.call('EXISTS', poolkey) == 0 and #queues > 0 then
    redis.call('SADD', poolkey, unpack(queues))
    redis.call('ZADD', poolstamp, now, tq)
    for _, q in ipairs(queues) do redis.call('ZADD', base .. 'qh:' .. q, 'NX', EMPTY, tq) end
  end
end
-- Wake idle pilots (they wait on this channel instead of polling) when this call enqueued work.
local function wake(base)
  if ENQUEUED then redis.call('PUBLISH', base .. 'wake', '1') end
end
