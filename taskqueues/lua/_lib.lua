-- _lib: helpers prepended to every script at load time (not a script of its own; match.lua does not use it).
-- Every key a script touches is declared in KEYS (match.lua's task queues aside: see its header). Keys
-- that depend on data (a task queue, its SubmitPool, the heads index of each eligible queue) are declared
-- by the caller; when a script finds one it was not given, it returns {'needkeys', key...} before writing
-- anything and the caller retries with them.
local EMPTY = 1e18
-- Every heads index holds this member, scored +inf (after every task queue, even an empty one), from the
-- moment it is created. Longer than the 64 bytes up to which Redis keeps a small sorted set as a listpack
-- (which parses every score from text on each ZADD and ZRANGE), it makes Redis keep the index as a
-- skiplist: a ZADD into a 100-entry index went from 10 us to 2 us. Readers stop before EMPTY, so before it.
-- The heads hash holds it as a field too (sync_heads), for the same reason: as a listpack, every HMGET of
-- match scans the whole hash (at 100 task queues, 17% of a filling match's instructions went there).
-- Nothing lists the heads hash; match only reads it by task-queue id.
local SKIPLIST = string.rep('~', 65)
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
-- Heads (match.lua reads them instead of every task-queue zset). The `heads` hash maps each non-empty
-- task queue to "<score> <member> <floor>": its head exactly (score as ZRANGE prints it) and a floor
-- "cpu:mem:tmp:need" at or below every member it has held since it was last empty. The `qfloor` hash maps
-- a catalog queue to a floor of every member of the task queues its heads index lists, so a pilot that
-- nothing there can fit is answered without a walk; a queue without an entry has no floor yet.
-- Every script that adds or removes task-queue members calls touched() for each change, then sync_heads()
-- once after its writes (the caller declares both hashes; need_heads() checks).
local TOUCHED = {}
local function need_heads(base)
  need(base .. 'heads')
  need(base .. 'qfloor')
end
local function parse_floor(text)
  local c, m, t, e = string.match(text, '^([^:]+):([^:]+):([^:]+):([^:]+)$')
  return {tonumber(c), tonumber(m), tonumber(t), tonumber(e)}
end
local function lower_floor(f, g)
  if not f then return {g[1], g[2], g[3], g[4]} end
  for i = 1, 4 do if g[i] < f[i] then f[i] = g[i] end end
  return f
end
local function floor_text(f)
  return string.format('%.17g:%.17g:%.17g:%.17g', f[1], f[2], f[3], f[4])
end
-- A member entered (`member`) or left (nil) task queue tq, whose SubmitPool is `queues` (nil if unknown).
local function touched(tq, member, queues)
  local entry = TOUCHED[tq]
  if not entry then entry = {added = 0} TOUCHED[tq] = entry end
  if queues then entry.queues = queues end
  if member then
    entry.added = entry.added + 1
    entry.floor = lower_floor(entry.floor, parse_floor(string.match(member, '^[^:]*:(.*)$')))
  end
end
-- Lower the floor of catalog queue q to take `f` in, when q has one.
local function lower_qfloor(base, q, f)
  local key = base .. 'qfloor'
  local old = redis.call('HGET', key, q)
  if not old then return end
  local text = floor_text(lower_floor(parse_floor(old), f))
  if text ~= old then redis.call('HSET', key, q, text) end
end
local function sync_heads(base)
  local heads = base .. 'heads'
  for tq, entry in pairs(TOUCHED) do
    local key = base .. 't:' .. tq
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #head == 0 then
      redis.call('HDEL', heads, tq)
    else
      local floor = entry.floor
      local old = redis.call('HGET', heads, tq)
      if old then
        floor = lower_floor(floor, parse_floor(string.match(old, ' (%S+)$')))
      elseif redis.call('ZCARD', key) > entry.added then
        floor = {0, 0, 0, 0} -- members from before heads were kept: nothing known about them
      end
      redis.call('HSET', heads, tq, head[2] .. ' ' .. head[1] .. ' ' .. floor_text(floor), SKIPLIST, '')
      if entry.floor then
        for _, q in ipairs(entry.queues or {}) do lower_qfloor(base, q, entry.floor) end
      end
    end
  end
  TOUCHED = {}
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
  for _, q in ipairs(queues) do redis.call('ZADD', base .. 'qh:' .. q, 'LT', rec.sc, rec.t, 'inf', SKIPLIST) end
  touched(rec.t, rec.m, queues)
end
-- Records are stored without their id (the hash field), with only the tail of their task-queue member
-- (":cpu:mem:tmp:need"), and without the attempt while it is 0 nor the retry limit while it is the
-- default (taskqueues.records.DEFAULT_MAX_RETRIES): memory per waiting job is a target. load/save put
-- them back and take them out, so scripts always see rec.id, rec.m, rec.a and rec.mr.
local MAX_RETRIES = 3
local function load(jobs, id)
  local raw = redis.call('HGET', jobs, id)
  if not raw then return nil end
  local rec = cjson.decode(raw)
  rec.id = id
  if rec.mt then rec.m, rec.mt = id .. rec.mt, nil end
  rec.a = rec.a or 0
  rec.mr = rec.mr or MAX_RETRIES
  return rec
end
local function save(jobs, rec)
  local id, m, a, mr = rec.id, rec.m, rec.a, rec.mr
  rec.id = nil
  if m then rec.mt, rec.m = string.sub(m, #id + 1), nil end
  if a == 0 then rec.a = nil end
  if mr == MAX_RETRIES then rec.mr = nil end
  redis.call('HSET', jobs, id, cjson.encode(rec))
  rec.id, rec.m, rec.mt, rec.a, rec.mr = id, m, nil, a, mr
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
    for _, q in ipairs(queues) do redis.call('ZADD', base .. 'qh:' .. q, 'NX', EMPTY, tq, 'inf', SKIPLIST) end
  end
end
-- Wake idle pilots (they wait on this channel instead of polling) when this call enqueued work.
local function wake(base)
  if ENQUEUED then redis.call('PUBLISH', base .. 'wake', '1') end
end
