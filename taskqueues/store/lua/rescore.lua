-- rescore: write back what re-pressure computed (learnt run times moved): each job's new pressure, run-time
-- estimate and score; a job waiting in its task queue moves there (the score, and the need its estimate
-- makes when it has no wall, are its member's: ZREM the old member, ZADD the new one). Then requests'
-- re-stored ETAs and load dates, and the task's progress marks.
-- Heads index: the walk in match.lua tolerates an index entry BELOW its task queue's real head (it raises
-- it and walks again) but never one ABOVE it (the task queue would be skipped while it holds the most
-- urgent job). A re-score may lower a head (ZADD LT would do) or raise it (an LT entry would then stay
-- below the new head: tolerated, but every match would redo the walk until a match raises it). So for
-- every task queue touched we set the entry of each queue of its SubmitPool to the real head score read
-- here, in the same atomic step: never above, and not needlessly below.
-- KEYS[1]  jobs hash
-- KEYS[2]  requests hash   (request id -> record JSON; "eta" and "load" are rewritten)
-- KEYS[3]  cursor hash     (periodic tasks' progress)
-- KEYS[4..] the work counter, the heads, qfloor, tqempty and tqmax hashes; task queues, SubmitPools and
--           heads indexes of the waiting jobs re-scored here
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  JSON {"jobs": [{"id": str, "pr": pressure, "e": ete, "me": the member's need,
--                          "sc": score as text}],
--                "requests": {id: eta}, "loads": {id: the date its load gives (matcher.eta)},
--                "progress": {field: value} (kept only if greater than stored),
--                "marks": {field: value} (set as given)}; values of progress and marks are numbers
-- Returns  {'ok', jobs rewritten, task-queue members moved} or {'needkeys', key...}
-- A job found final (it ended since the caller read it) is left alone; a job matched or running keeps its
-- lease and only gets its new values (used if it is requeued).
SCRIPT = 'rescore'
local base = check_base({'jobs', 'requests', 'cursor'})
check_count(2, true)
local payload = check_json('ARGV[2] (payload)', ARGV[2])
if check_fields('ARGV[2] (payload)', payload,
    {jobs = 'array', requests = 'any', loads = 'any', progress = 'any', marks = 'any'}, {'jobs'}) then
  for i, j in ipairs(payload.jobs) do
    check_fields('ARGV[2] (payload).jobs[' .. (i - 1) .. ']', j,
      {id = 'job', pr = 'signed', e = 'ete', me = 'count', sc = 'score'}, {'id', 'pr', 'e', 'me', 'sc'})
    if type(j) == 'table' and type(j.me) == 'number' and j.me > MAX_ETE then
      problem('ARGV[2] (payload).jobs[' .. (i - 1) .. '].me', 'wants at most ' .. MAX_ETE .. ', got ' .. j.me)
    end
  end
  for _, field in ipairs({'requests', 'loads', 'progress', 'marks'}) do
    local where = 'ARGV[2] (payload).' .. field
    local map = payload[field]
    local dated = field == 'requests' or field == 'loads'
    if map ~= nil and not is_object(map) then problem(where, 'wants an object, got ' .. shown(map)) map = {} end
    for k, v in pairs(map or {}) do
      check_text(where, k, dated and PATTERN.request or PATTERN.name, 256)
      check_number(where .. '.' .. k, v, -MAX_TIME, MAX_TIME, false, not dated)
    end
  end
end
if PROBLEM then return refused() end
declare_keys()
local FINAL = {done = true, failed = true, cancelled = true, ['dep-failed'] = true}

need(base .. K_WORK)
need_heads(base)
local recs, pools = {}, {}
for i, j in ipairs(payload.jobs) do
  local rec = load(KEYS[1], j.id)
  recs[i] = rec
  if rec and rec.s == 'waiting' and rec.t and not pools[rec.t] then pools[rec.t] = pool_of(base, rec.t) end
end
local missing = needkeys()
if missing then return missing end

local rewritten, moved, retouched = 0, 0, {}
for i, j in ipairs(payload.jobs) do
  local rec = recs[i]
  if rec and not FINAL[rec.s] then
    add_work(base, -work_of(rec))
    rec.pr, rec.e, rec.sc = j.pr, j.e, j.sc
    local newm = rec.m
    local head = rec.m and string.match(rec.m, '^(.*):[^:]*$')
    if head then newm = head .. ':' .. string.format('%d', j.me) end -- a whole number (-0 too, as 0)
    if rec.s == 'waiting' then
      local key = base .. K_TQ .. rec.t
      if redis.call('ZSCORE', key, rec.m) then
        redis.call('ZREM', key, rec.m)
        redis.call('ZADD', key, j.sc, newm)
        touched(rec.t, newm, pools[rec.t])
        retouched[rec.t] = true
        moved = moved + 1
      end
    end
    rec.m = newm
    add_work(base, work_of(rec))
    save(KEYS[1], rec)
    rewritten = rewritten + 1
  end
end
for tq in pairs(retouched) do
  local head = redis.call('ZRANGE', base .. K_TQ .. tq, 0, 0, 'WITHSCORES')
  if #head > 0 then
    for _, q in ipairs(pools[tq]) do index_head(base, q, tq, head[2]) end
  end
end
sync_heads(base, 0) -- a move within a task queue never empties it: no time to mark it with
local dated = {}
for id, eta in pairs(payload.requests or {}) do dated[id] = {eta = eta} end
for id, load in pairs(payload.loads or {}) do
  dated[id] = dated[id] or {}
  dated[id].load = load
end
for id, new in pairs(dated) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    local rec = cjson.decode(raw)
    rec.eta = new.eta or rec.eta
    rec.load = new.load or rec.load
    redis.call('HSET', KEYS[2], id, cjson.encode(rec))
  end
end
for field, value in pairs(payload.progress or {}) do
  local old = tonumber(redis.call('HGET', KEYS[3], field))
  if not old or tonumber(value) > old then redis.call('HSET', KEYS[3], field, value) end
end
for field, value in pairs(payload.marks or {}) do redis.call('HSET', KEYS[3], field, value) end
return {'ok', rewritten, moved}
