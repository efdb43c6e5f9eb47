-- update: change waiting or held jobs (`pilotfish update`), all or none in one step: their requirements (the
-- caller validated them as at submission and computed each job's new task queue, its definition and eligible
-- queues, the member tail and the stored requirements) and/or their own priority (a score moves by the
-- difference). Every job is checked first (known, waiting or held, its record what enqueue() writes), and only
-- then is every job changed: a job matched, cancelled or forgotten since the caller read it refuses the call,
-- naming it, and no job is changed. A waiting job leaves its task queue and enters the new one (the heads
-- bookkeeping follows, touched/sync_heads); one in back-off or held just carries the new values (it enters the
-- new task queue when it waits again).
-- KEYS[1]  jobs hash
-- KEYS[2]  tqdefs hash
-- KEYS[3]  tqempty zset
-- KEYS[4]  poolstamp zset
-- KEYS[5]  releasing zset
-- KEYS[6..] the jobs' task queues, the new ones, their pools and the heads indexes of their queues (or
--           needkeys), the work counter, the heads, qfloor, tqempty and tqmax hashes, the events key and the
--           stats hash
-- ARGV[1]  key base   ARGV[2] now   ARGV[3] who
-- ARGV[4..] three per job (at most MAX_BATCH jobs, each named once), ARGV[i], ARGV[i + 1], ARGV[i + 2]:
--          its id; what changes, as its event says; the change as a JSON object {"t": tq, "def": canonical,
--          "queues": [...], "m_tail": ":cpu:mem:tmp:need", "r"/"rn" (each optional), "py": the new priority,
--          "py0": the priority the job has when it has none of its own (its request's)}: the requirement fields
--          all or none, the priority fields both or none
-- Returns  {'ok', state...}: each job's state after, in order | {'refused', job id, state} | {'unknown', job id}
--          | {'needkeys', key...}
SCRIPT = 'update'
local base = check_base({'jobs', 'tqdefs', 'tqempty', 'poolstamp', 'releasing'})
check_count(6)
if (#ARGV - 3) % 3 ~= 0 then
  problem('ARGV', 'wants three arguments per job after ARGV[3] (id, change, JSON), got ' .. (#ARGV - 3))
end
if (#ARGV - 3) / 3 > MAX_BATCH then problem('ARGV', 'holds more than ' .. MAX_BATCH .. ' jobs') end
local now = argv_number(2, 'now', 0, MAX_TIME)
local by = argv_text(3, 'who', PATTERN.name, 256)
local SPEC = {t = 'tq', def = 'json', queues = 'array', m_tail = 'tail', r = 'json', rn = 'any', py = 'signed',
              py0 = 'signed'}
local ids, whats, args, at = {}, {}, {}, {}
for i = 4, #ARGV - 2, 3 do
  local id = argv_text(i, 'job id', PATTERN.job, 64)
  if at[id] then problem('ARGV[' .. i .. '] (job id)', 'names job ' .. id .. ' again (ARGV[' .. at[id] .. '])') end
  at[id] = i
  ids[#ids + 1] = id
  whats[#ids] = argv_text(i + 1, 'change', nil, 4096)
  local where = 'ARGV[' .. (i + 2) .. '] (update)'
  local arg = check_json(where, ARGV[i + 2])
  args[#ids] = arg
  if check_fields(where, arg, SPEC) then
    if (arg.t ~= nil) ~= (arg.def ~= nil) or (arg.t ~= nil) ~= (arg.queues ~= nil)
        or (arg.t ~= nil) ~= (arg.m_tail ~= nil) then
      problem(where, 'wants t, def, queues and m_tail all or none')
    end
    if (arg.py ~= nil) ~= (arg.py0 ~= nil) then problem(where, 'wants py and py0 both or none') end
    for j, q in ipairs(arg.queues or NONE) do check_text(where .. '.queues[' .. j .. ']', q, PATTERN.queue, 400) end
    if arg.rn ~= nil then check_text(where .. '.rn', arg.rn, '^c?m?$') end
  end
end
if PROBLEM then return refused() end
declare_keys()
events_by(now, by)
need(base .. K_WORK)
need_heads(base)

-- Every job checked, and every key it needs declared, before the first write.
local recs, pools = {}, {}
for n, id in ipairs(ids) do
  local rec, arg = load(KEYS[1], id), args[n]
  if not rec then return {'unknown', id} end
  if (rec.s ~= 'waiting' and rec.s ~= 'held') or not enqueueable(rec) then return {'refused', id, rec.s} end
  need(base .. K_TQ .. rec.t)
  local queues
  if arg.t then
    queues = pool_of(base, arg.t)
    if #queues == 0 then
      queues = arg.queues
      for _, q in ipairs(queues) do need(base .. K_QH .. q) end
    end
  else
    queues = pool_of(base, rec.t)
  end
  recs[n], pools[n] = rec, queues
end
local missing = needkeys()
if missing then return missing end

local out = {'ok'}
for n, id in ipairs(ids) do
  local rec, arg, queues = recs[n], args[n], pools[n]
  local inqueue = rec.s == 'waiting' and redis.call('ZREM', base .. K_TQ .. rec.t, rec.m) == 1
  if inqueue then touched(rec.t, nil) end
  add_work(base, -work_of(rec))
  if arg.t then
    ensure_pool(base, KEYS[2], KEYS[4], arg.t, arg.def, queues, now)
    rec.t, rec.m, rec.r, rec.rn = arg.t, id .. arg.m_tail, arg.r, arg.rn
  end
  if arg.py then
    local old = tonumber(rec.py) or arg.py0
    rec.sc = string.format('%.3f', tonumber(rec.sc) + old - arg.py)
    rec.py = arg.py
  end
  add_work(base, work_of(rec))
  if inqueue then
    enqueue(base, KEYS[3], KEYS[5], rec, queues, now)
  end
  save(KEYS[1], rec)
  append_event(base, id, {{t = now, f = rec.s, s = rec.s, by = by, a = rec.a, why = whats[n]}})
  out[#out + 1] = rec.s
end
sync_heads(base, now)
wake(base)
return out
