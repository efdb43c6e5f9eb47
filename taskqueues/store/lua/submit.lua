-- submit: store many jobs in one atomic step; a waiting job enters its task queue, a blocked one waits
-- for its dependencies (records carry dn = dependents, nd = unfinished dependencies).
-- KEYS[1]  jobs hash            (job id -> record JSON)
-- KEYS[2]  seq string           (job id counter)
-- KEYS[3]  tqdefs hash          (task-queue id -> canonical requirements)
-- KEYS[4]  tqempty zset         (task-queue id -> time it became empty)
-- KEYS[5]  poolstamp zset       (task-queue id -> time its SubmitPool was computed)
-- KEYS[6]  releasing zset
-- KEYS[7]  requests hash        (request id -> record JSON)
-- KEYS[8]  idrange hash         (ceil, pending, epoch: job ids are never given twice, see below)
-- KEYS[9..] task-queue zsets, SubmitPool sets, queue-heads zsets, byrule sets, the notify watch zset, the work counter,
--           the heads, qfloor and tqmax hashes
--           and the stats hash, whose counters this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  now (unix seconds)
-- ARGV[3]  JSON {"tqs": {tq: {"def": str, "queues": [queue...]}}, "jobs": [record...],
--                "request": {"id": str, "rec": {...}} (optional)}; a record carries t (task queue),
--          m_tail (":cpu:mem:tmp:need"), sc (score, a string), s (waiting | blocked | failed | dep-failed),
--          dl / dpl (indexes into "jobs" of its dependents / dependencies, resolved to ids as dn / dp)
--          and the other fields of NEW below, nothing else: a job is born without a lease, a pilot, an
--          attempt or a result. The jobs come in dependency order (every dependent after its dependencies);
--          a blocked job's nd counts the jobs of the call that list it as a dependent, all unfinished; a
--          failed or dep-failed job (refused at release: its template did not evaluate) carries its reason.
-- ARGV[4]  an id ceiling the caller saw replicas acknowledge (a 'replicate' reply's), or ''
-- ARGV[5]  seconds a replica the primary had is still counted once disconnected (0: connected ones only)
-- Returns  {'ok', replicas, id...}: the primary's replicas (connected, or seen within ARGV[5] seconds), the
--          ids in the order of the jobs;
--          {'replicate', ceiling}: nothing stored, WAIT for a replica and call again with the ceiling as ARGV[4];
--          or {'needkeys', key...}
--
-- Job ids are never given twice, even by a replica promoted after a failover that lost writes. An id is given
-- only below the ceiling (idrange.ceil); while the primary has replicas, the ceiling is raised (by the jobs
-- plus ID_BLOCK) only to a value the caller saw a replica hold (WAIT), so every replica Sentinel may promote
-- holds a ceiling above every id given. A replica cut off (paused, its link broken) can still be promoted
-- when it comes back, so one seen within ARGV[5] seconds still counts (idrange.rseen, .rat). A primary whose replication id is not the one that gave the last
-- ids (a promoted replica, a restart) starts counting at the ceiling. Without replicas the ceiling follows
-- the ids (a restart from the primary's own files then continues where its data ends).
SCRIPT = 'submit'
local base = check_base({'jobs', 'seq', 'tqdefs', 'tqempty', 'poolstamp', 'releasing', 'requests', 'idrange'})
check_count(5, true)
local ID_BLOCK = 10000
local now = argv_number(2, 'now', 0, MAX_TIME)
if ARGV[4] ~= '' then argv_number(4, 'acknowledged id ceiling', 1, 1e14, true) end
local window = argv_number(5, 'replica window', 0, MAX_TIME)
local payload = check_json('ARGV[3] (payload)', ARGV[3])
local NEW = {s = 'any', t = 'any', m_tail = 'tail', sc = 'score', c = 'text', r = 'json', rn = 'any', e = 'ete', h = 'ete',
             ts = 'time', mr = 'count', q = 'request', n = 'text', k = 'text', ru = 'name', dl = 'array',
             dpl = 'array', nd = 'count', dx = 'one', df = 'json', pr = 'signed', why = 'text', te = 'time',
             ro = 'array', rm = 'count'}
local INITIAL = {waiting = true, blocked = true, failed = true, ['dep-failed'] = true}
local REQUEST = {name = 'text', priority = 'signed', ts = 'time', eta = 'signed', cp = 'amount', n = 'count',
                 owner = 'name', group = 'name', load = 'signed', cores = 'amount', notify = 'text'}
if check_fields('ARGV[3] (payload)', payload, {tqs = 'any', jobs = 'array', request = 'any'}, {'tqs', 'jobs'}) then
  local jobs, tqs = payload.jobs, payload.tqs
  if #jobs == 0 then problem('ARGV[3] (payload).jobs', 'holds no job') end
  if not is_object(tqs) then problem('ARGV[3] (payload).tqs', 'wants an object, got ' .. shown(tqs)) tqs = {} end
  for tq, def in pairs(tqs) do
    local where = 'ARGV[3] (payload).tqs.' .. tq
    check_text(where, tq, PATTERN.tq, 256)
    if check_fields(where, def, {def = 'json', queues = 'array'}, {'def', 'queues'}) then
      for i, q in ipairs(def.queues) do check_text(where .. '.queues[' .. i .. ']', q, PATTERN.queue, 400) end
    end
  end
  -- How many jobs of the call list each one as a dependent (its unfinished dependencies, if blocked).
  local listed, listers = {}, {}
  -- The text naming a job is made only for a check that fails, or that a test recording nothing cannot pass
  -- (made for every job, it and the checks' texts were a third of what a batch's checks cost).
  local function job_at(i) return 'ARGV[3] (payload).jobs[' .. (i - 1) .. ']' end
  local REQUIRED = {'s', 't', 'm_tail', 'sc', 'c', 'e', 'ts'}
  for i, rec in ipairs(jobs) do
    if fields_pass(rec, NEW, REQUIRED) or check_fields(job_at(i), rec, NEW, REQUIRED) then
      if not INITIAL[rec.s] then
        problem(job_at(i) .. '.s', 'wants a state a job is born in (waiting, blocked, failed, dep-failed), got '
          .. shown(rec.s))
      end
      local final = rec.s == 'failed' or rec.s == 'dep-failed'
      local tq_pattern = (final or rec.dx) and '^[%w_.%-]*$' or PATTERN.tq
      if not text_ok(rec.t, tq_pattern, 256) then
        check_text(job_at(i) .. '.t', rec.t, tq_pattern, 256)
      end
      if rec.rn and not text_ok(rec.rn, '^c?m?$') then
        check_text(job_at(i) .. '.rn', rec.rn, '^c?m?$')
      end
      if rec.mr then check_number(job_at(i) .. '.mr', rec.mr, 0, 100, true) end
      for j, x in ipairs(rec.ro or NONE) do check_number(job_at(i) .. '.ro[' .. (j - 1) .. ']', x, 0, 255, true) end
      if rec.rm then check_number(job_at(i) .. '.rm', rec.rm, 0, 100, true) end
      if rec.s == 'waiting' and not tqs[rec.t] then
        problem(job_at(i) .. '.t', 'names a task queue this call does not define: ' .. shown(rec.t))
      end
      if rec.dx and rec.s == 'waiting' then problem(job_at(i) .. '.dx', 'a deferred job waits for its dependencies') end
      if (rec.te ~= nil or rec.why ~= nil) ~= final then
        problem(job_at(i), 'carries why and te if and only if it is failed or dep-failed')
      end
      for _, field in ipairs((rec.dl or rec.dpl) and {'dl', 'dpl'} or NONE) do
        local seen = {}
        for j, d in ipairs(rec[field] or NONE) do
          local after = field == 'dl'
          check_number(job_at(i) .. '.' .. field .. '[' .. (j - 1) .. ']', d, after and i or 0,
            after and #jobs - 1 or i - 2, true)
          if after and seen[d] then problem(job_at(i) .. '.dl', 'names job ' .. tostring(d) .. ' twice') end
          seen[d] = true
          if after and PROBLEM == nil then
            listed[d + 1] = (listed[d + 1] or 0) + 1
            listers[d + 1] = listers[d + 1] or {}
            listers[d + 1][i - 1] = true
          end
        end
      end
    end
  end
  for i, rec in ipairs(PROBLEM == nil and jobs or {}) do
    local n = listed[i] or 0
    if rec.s == 'blocked' then
      if rec.nd ~= n or n == 0 then
        problem(job_at(i) .. '.nd', 'wants ' .. n .. ', the jobs of this call that list it as a dependent, got '
          .. shown(rec.nd))
      end
      for d in pairs(listers[i] or {}) do
        local dep = jobs[d + 1].s
        if dep ~= 'waiting' and dep ~= 'blocked' then
          problem(job_at(i), 'is blocked behind job ' .. d .. ', which is ' .. dep .. ' (it would never be released)')
        end
      end
    else
      if rec.nd ~= nil then problem(job_at(i) .. '.nd', 'only a blocked job counts unfinished dependencies') end
      if rec.s == 'waiting' and n > 0 then problem(job_at(i) .. '.s', 'a job listed as a dependent cannot wait yet') end
    end
    if rec.dpl then -- a dependency may be named twice (one edge), as the user wrote it
      local want, named, count = listers[i] or {}, {}, 0
      for _, d in ipairs(rec.dpl) do
        if not named[d] then count = count + 1 end
        named[d] = true
        if not want[d] then problem(job_at(i) .. '.dpl', 'names job ' .. d .. ', which does not list it in its dl') end
      end
      if count ~= n then problem(job_at(i) .. '.dpl', 'misses some of the jobs that list it in their dl') end
    end
  end
  local request = payload.request
  if request ~= nil and check_fields('ARGV[3] (payload).request', request, {id = 'request', rec = 'any'},
      {'id', 'rec'}) then
    check_fields('ARGV[3] (payload).request.rec', request.rec, REQUEST)
    if PROBLEM == nil and redis.call('HEXISTS', KEYS[7], request.id) == 1 then
      problem('ARGV[3] (payload).request.id', 'request ' .. shown(request.id) .. ' exists already')
    end
  end
end
if PROBLEM then return refused() end

declare_keys()
local pools = {}
need(base .. K_WORK)
need_heads(base)
for _, rec in ipairs(payload.jobs) do
  if rec.ru then need(base .. K_BYRULE .. rec.ru) end
end
for tq, def in pairs(payload.tqs) do
  local queues = pool_of(base, tq)
  if #queues == 0 then
    queues = def.queues
    for _, q in ipairs(queues) do need(base .. K_QH .. q) end
  end
  pools[tq] = queues
end
local missing = needkeys()
if missing then return missing end

-- The id range (see the header). fakeredis has no INFO: one primary, no replica. A user not allowed INFO
-- may not submit (it could not tell a new primary).
local info = redis.pcall('INFO', 'replication')
if type(info) == 'table' and not string.find(tostring(info.err), 'Unknown Redis command', 1, true) then
  return redis.error_reply('submit: INFO replication failed (' .. tostring(info.err) .. '): nothing stored')
end
if type(info) ~= 'string' then info = '' end
local replid = string.match(info, 'master_replid:(%w+)') or 'none'
local replicas = tonumber(string.match(info, 'connected_slaves:(%d+)')) or 0
local range = redis.call('HMGET', KEYS[8], 'epoch', 'ceil', 'pending', 'rseen', 'rat')
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
local ceil = math.max(tonumber(range[2]) or 0, seq)
if range[1] ~= replid then
  if ceil > seq then
    redis.log(redis.LOG_WARNING, 'pilotfish: a new primary for ' .. KEYS[2] .. '; job ids resume at '
      .. ceil .. ' (the last id it holds is ' .. seq .. ')')
    seq = ceil
    redis.call('SET', KEYS[2], string.format('%d', seq))
  end
  redis.call('HSET', KEYS[8], 'epoch', replid)
  redis.call('HDEL', KEYS[8], 'pending', 'rseen', 'rat')
  range[3], range[4] = false, false
end
if replicas > 0 then
  redis.call('HSET', KEYS[8], 'rseen', replicas, 'rat', ARGV[2])
elseif range[4] and now - tonumber(range[5]) <= window then
  replicas = tonumber(range[4])
end
if ARGV[4] ~= '' and ARGV[4] == range[3] then
  ceil = math.max(ceil, tonumber(ARGV[4]))
  redis.call('HDEL', KEYS[8], 'pending')
end
if seq + #payload.jobs > ceil then
  if replicas > 0 then
    local pending = string.format('%d', seq + #payload.jobs + ID_BLOCK)
    redis.call('HSET', KEYS[8], 'pending', pending)
    return {'replicate', pending}
  end
  ceil = seq + #payload.jobs
end
redis.call('HSET', KEYS[8], 'ceil', string.format('%d', ceil))

for tq, def in pairs(payload.tqs) do ensure_pool(base, KEYS[3], KEYS[5], tq, def.def, pools[tq], now) end
local ids = {'ok', replicas}
-- The ids in one INCRBY, the work in one INCRBY (a command per job was a fifth of a batch's instructions).
local first, work = redis.call('INCRBY', KEYS[2], #payload.jobs) - #payload.jobs, 0
for i, rec in ipairs(payload.jobs) do
  rec.id = tostring(first + i)
  if rec.m_tail then rec.m = rec.id .. rec.m_tail end
  rec.m_tail = nil
  if rec.s == 'waiting' or rec.s == 'blocked' then
    local w = work_of(rec) -- at most 1e15 a job (TAIL_MAX): the sum goes out before a double loses a unit
    if work + w > 2^53 then add_work(base, work) work = 0 end
    work = work + w
  end
  if rec.s == 'blocked' then count_blocked(base, rec, 1) end
  if rec.s == 'failed' or rec.s == 'dep-failed' then count(base, 'ended:' .. rec.s, 1) end
  ids[#ids + 1] = rec.id
end
add_work(base, work)
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
    redis.call('SADD', base .. K_BYRULE .. rec.ru, rec.id)
  end
  save(KEYS[1], rec)
end
if request then
  request.rec.first, request.rec.last = ids[3], ids[#ids]
  redis.call('HSET', KEYS[7], request.id, cjson.encode(request.rec))
  -- A request with a webhook is watched until it ends (taskqueues/store/notices.py; the caller declares the key).
  if request.rec.notify then redis.call('ZADD', base .. K_NOTIFYWATCH, now, request.id) end
end
sync_heads(base, now)
wake(base)
return ids
