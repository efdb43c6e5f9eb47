-- heartbeat: a pilot renews the leases of the jobs it holds, reports what each payload has used so far,
-- and learns which of them to kill.
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  kills hash (job id -> reason)
-- KEYS[4]  pilots hash (pilot id -> record JSON)
-- KEYS[5]  pilotseen zset (pilot id -> last heartbeat)
-- KEYS[6]  stats hash: the record's mlat (match latencies the pilot saw since its last heartbeat: a count per
--          bucket of taskqueues.store.stats.MATCH_BUCKETS, then their sum) is added to its match_seconds fields
-- ARGV[1]  pilot id
-- ARGV[2]  now
-- ARGV[3]  lease length (seconds)
-- ARGV[4]  pilot record JSON ("" = keep the stored one): an object; the fields operators and the control
--          plane read (PILOT below) must have their types, others are kept as given
-- ARGV[5..] job id, attempt, peak memory MB, CPU seconds, job id, ...: four per job; usage "" = not measured
--          yet. Usage is stored on the record (pm, cpu) only for the job's current attempt on this pilot.
-- A job the reaper requeued from this pilot's lease of the attempt named, and nobody matched since (the store
-- was paused longer than the lease), is taken back and leased again (_lib.lua's requeued_from): KEYS then also
-- hold its task queue, the delayed, releasing and parked keys and the heads hashes (or it answers needkeys).
-- Returns  {kills, lost}: kills = {id, reason, ...} to terminate; lost = {id, ...} no longer this pilot's
--          (requeued after an expired lease, or finished): the pilot must stop them without reporting.
SCRIPT = 'heartbeat'
local base = base_of_jobs({'jobs', 'leases', 'kills', 'pilots', 'pilotseen', 'stats'})
check_count(4)
local mlat
if (#ARGV - 4) % 4 ~= 0 then problem('ARGV[5..]', 'wants four values per job, got ' .. (#ARGV - 4)) end
local pilot = argv_text(1, 'pilot id', PATTERN.name, 256)
local now = argv_number(2, 'now', 0, MAX_TIME)
local lease = argv_number(3, 'lease length', 0, MAX_TIME)
if lease <= 0 then problem('ARGV[3] (lease length)', 'wants a positive length, got ' .. shown(ARGV[3])) end
if ARGV[4] ~= '' then
  local PILOT = {name = 'scalar', queue = 'scalar', node = 'scalar', batch = 'scalar', batch_id = 'scalar', pid = 'count',
                 cores = 'amount', mem = 'amount', tmp = 'amount', used_cpu = 'amount', used_mem = 'amount',
                 used_tmp = 'amount', free_cpu = 'maybe-amount', free_mem = 'maybe-amount', free_tmp = 'maybe-amount',
                 running = 'array', processed = 'count', started = 'time', time_left = 'maybe-amount',
                 draining = 'bool', stopped = 'scalar', mlat = 'array'}
  local record = check_json('ARGV[4] (pilot record)', ARGV[4])
  for k, v in pairs(record) do
    if PILOT[k] then check_kind('ARGV[4] (pilot record).' .. k, v, PILOT[k]) end
  end
  if PROBLEM == nil and record.mlat then
    if #record.mlat < 2 or #record.mlat > 64 then
      problem('ARGV[4] (pilot record).mlat', 'wants 2 to 64 numbers (counts per bucket, then their sum)')
    end
    for i, v in ipairs(record.mlat) do
      check_number('ARGV[4] (pilot record).mlat[' .. (i - 1) .. ']', v, 0, MAX_AMOUNT, i < #record.mlat)
    end
    mlat = record.mlat
  end
end
for i = 5, #ARGV - 3, 4 do
  argv_text(i, 'job id', PATTERN.job, 64)
  argv_number(i + 1, 'attempt', 0, 1e9, true)
  for j = i + 2, i + 3 do
    if ARGV[j] ~= '' then argv_number(j, 'usage', 0, MAX_AMOUNT) end
  end
end
if PROBLEM then return refused() end
-- Read phase: a job the reaper requeued from this pilot's lease of the attempt it names, and nobody matched
-- since (the store was paused longer than the lease), is taken back (_lib.lua's requeued_from): its payload
-- goes on, leased again. Its keys are declared, or the script answers needkeys before any write.
declare_keys()
events_by(now, 'pilot ' .. pilot)
local back, raws = {}, {}
for i = 5, #ARGV, 4 do
  local raw = redis.call('HGET', KEYS[1], ARGV[i]) -- kept for the write phase; decoded here only if marked
  raws[ARGV[i]] = raw
  local rec = raw and string.find(raw, '"lx":', 1, true) and decode(raw, ARGV[i])
  if rec and requeued_from(rec, tonumber(ARGV[i + 1]), pilot) then
    back[ARGV[i]] = true
    need_back(base, rec)
  end
end
local missing = needkeys()
if missing then return missing end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], pilot, ARGV[4]) end
if mlat then
  for i = 1, #mlat - 1 do
    if mlat[i] > 0 then redis.call('HINCRBY', KEYS[6], 'match_seconds:' .. (i - 1), mlat[i]) end
  end
  redis.call('HINCRBYFLOAT', KEYS[6], 'match_seconds:sum', string.format('%.6f', mlat[#mlat]))
end
redis.call('ZADD', KEYS[5], now, pilot)
local kills, lost = {}, {}
for i = 5, #ARGV, 4 do
  local id, attempt = ARGV[i], tonumber(ARGV[i + 1])
  local pm, cpu = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local raw = raws[id]
  raws[id] = nil -- a job named twice: its second turn reads what the first one wrote
  local rec
  if raw == nil then rec = load(KEYS[1], id) else rec = decode(raw, id) end
  if back[id] and requeued_from(rec, attempt, pilot) then
    take_back(base, rec, pilot)
    if pm and cpu then rec.pm, rec.cpu = pm, cpu end
    save(KEYS[1], rec)
    redis.call('ZADD', KEYS[2], now + lease, id)
  elseif rec and rec.pl == pilot and check_report(rec, id, attempt, {'matched', 'running'}) == nil then
    redis.call('ZADD', KEYS[2], 'XX', now + lease, id)
    if pm and cpu and (rec.pm ~= pm or rec.cpu ~= cpu) then
      rec.pm, rec.cpu = pm, cpu
      save(KEYS[1], rec)
    end
    local reason = redis.call('HGET', KEYS[3], id)
    if reason then kills[#kills + 1] = id kills[#kills + 1] = reason end
  else
    lost[#lost + 1] = id
  end
end
sync_heads(base, now)
return {kills, lost}
