-- update: change a waiting or held job (`pilotfish update`): its requirements (the caller validated them as at
-- submission and computed the new task queue, its definition and eligible queues, the member tail and the
-- stored requirements) and/or its own priority (its score moves by the difference), in one step. A waiting
-- job leaves its task queue and enters the new one (the heads bookkeeping follows, touched/sync_heads); one in
-- back-off or held just carries the new values (it enters the new task queue when it waits again). Anything
-- else is refused with its state, nothing changed.
-- KEYS[1]  jobs hash
-- KEYS[2]  tqdefs hash
-- KEYS[3]  tqempty zset
-- KEYS[4]  poolstamp zset
-- KEYS[5]  releasing zset
-- KEYS[6..] the job's task queue, the new one, its pool and the heads indexes of its queues (or needkeys), the
--           work counter, the heads, qfloor, tqempty and tqmax hashes, the events key and the stats hash
-- ARGV[1]  key base   ARGV[2] now   ARGV[3] who   ARGV[4] job id   ARGV[5] what changes, as the event says it
-- ARGV[6]  JSON {"t": tq, "def": canonical, "queues": [...], "m_tail": ":cpu:mem:tmp:need", "r"/"rn" (each
--          optional), "py": the new priority, "py0": the priority the job has when it has none of its own
--          (its request's)}: the requirement fields all or none, the priority fields both or none
-- Returns  {'ok', state} | {'refused', state} | {'unknown'} | {'needkeys', key...}
SCRIPT = 'update'
local base = check_base({'jobs', 'tqdefs', 'tqempty', 'poolstamp', 'releasing'})
check_count(6, true)
local now = argv_number(2, 'now', 0, MAX_TIME)
local by = argv_text(3, 'who', PATTERN.name, 256)
local id = argv_text(4, 'job id', PATTERN.job, 64)
local what = argv_text(5, 'change', nil, 4096)
local arg = check_json('ARGV[6] (update)', ARGV[6])
local SPEC = {t = 'tq', def = 'json', queues = 'array', m_tail = 'tail', r = 'json', rn = 'any', py = 'signed',
              py0 = 'signed'}
if check_fields('ARGV[6] (update)', arg, SPEC) then
  if (arg.t ~= nil) ~= (arg.def ~= nil) or (arg.t ~= nil) ~= (arg.queues ~= nil) or (arg.t ~= nil) ~= (arg.m_tail ~= nil) then
    problem('ARGV[6] (update)', 'wants t, def, queues and m_tail all or none')
  end
  if (arg.py ~= nil) ~= (arg.py0 ~= nil) then problem('ARGV[6] (update)', 'wants py and py0 both or none') end
  for i, q in ipairs(arg.queues or {}) do check_text('ARGV[6] (update).queues[' .. i .. ']', q, PATTERN.queue, 400) end
  if arg.rn ~= nil then check_text('ARGV[6] (update).rn', arg.rn, '^c?m?$') end
end
if PROBLEM then return refused() end
declare_keys()
events_by(now, by)
local rec = load(KEYS[1], id)
if not rec then return {'unknown'} end
if (rec.s ~= 'waiting' and rec.s ~= 'held') or not enqueueable(rec) then return {'refused', rec.s} end
need(base .. K_WORK)
need_heads(base)
need(base .. K_TQ .. rec.t)
local queues = {}
if not arg.t then queues = pool_of(base, rec.t) end
if arg.t then
  queues = pool_of(base, arg.t)
  if #queues == 0 then
    queues = arg.queues
    for _, q in ipairs(queues) do need(base .. K_QH .. q) end
  end
end
local missing = needkeys()
if missing then return missing end

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
append_event(base, id, {{t = now, f = rec.s, s = rec.s, by = by, a = rec.a, why = what}})
sync_heads(base, now)
wake(base)
return {'ok', rec.s}
