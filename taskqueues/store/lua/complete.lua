-- complete: a payload succeeded. Dependents whose last dependency this was are released in the same step:
-- into their task queue, or, when a requirement waits for dependency outputs, into the releasing set where
-- the caller evaluates it (release.lua then enqueues it).
-- Publishes the ids it put in the releasing set (space-separated) on the release channel (keys.release_channel).
-- A lease taken under a shares policy gives its cores back to the fair hash's counters (fair_end, _lib.lua).
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  kills hash
-- KEYS[4]  tqempty zset
-- KEYS[5]  releasing zset (job id -> time released, waiting for its deferred requirements)
-- KEYS[6]  done log zset (job id -> end time; what re-pressure reads)
-- KEYS[7]  etekeys hash (job key -> last successful run time)
-- KEYS[8]  eterules hash (rule -> "n mean var hn hlog hvar": run times' mean and variance, cumulative for
--          100 runs, then exponentially weighted with alpha 1/100, and the same of log(run time / the job's
--          hint ``h``) over the hn runs that had one, as taskqueues.ete.RuleStats.update; "n mean" as stored
--          before is read as no spread known; learnt here so each success counts exactly once)
-- KEYS[9..] the work counter, the heads, qfloor, tqempty and tqmax hashes; task queues, pools and heads
--           indexes of dependents released here
--           and the stats hash, whose counters this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] attempt   ARGV[4] pilot id   ARGV[5] now
-- ARGV[6]  result JSON {"x": exit, "w": wall s, "cpu": cpu s, "pm": peak MB, "o": outputs JSON string,
--          "why": text, "st": started} (those fields only: they are copied onto the record)
-- A job the reaper requeued from this pilot's lease of this attempt, and nobody matched since (the store was
-- paused longer than the lease), is taken back and recorded done (_lib.lua's requeued_from): KEYS then also
-- hold its task queue and the delayed, releasing and parked keys (or the script answers needkeys).
-- Returns  {'ok', released id...} or {'stale', reason} or {'needkeys', key...}
SCRIPT = 'complete'
-- One more value into a running mean and variance: Welford's update for the first 100, then exponentially
-- weighted (alpha 1/100); the same formula as taskqueues.ete._step. Returns the count, mean and variance.
local function ete_step(n, mean, var, value)
  n = n + 1
  local weight = 1 / n
  if n > 100 then weight = 1 / 100 end
  local delta = value - mean
  return n, mean + delta * weight, (1 - weight) * (var + weight * delta * delta)
end
local base = check_base({'jobs', 'leases', 'kills', 'tqempty', 'releasing', 'donelog', 'etekeys', 'eterules'})
check_count(6, true)
local id = argv_text(2, 'job id', PATTERN.job, 64)
local attempt = argv_number(3, 'attempt', 0, 1e9, true)
local pilot = argv_text(4, 'pilot id', PATTERN.name, 256)
local now = argv_number(5, 'now', 0, MAX_TIME)
local result = check_json('ARGV[6] (result)', ARGV[6])
check_fields('ARGV[6] (result)', result, RESULT)
if PROBLEM then return refused() end
declare_keys()
events_by(now, 'pilot ' .. pilot)
local rec = load(KEYS[1], id)
-- Requeued by the reaper after the store paused longer than the lease, and matched by nobody since: this
-- pilot's report of that attempt takes it back (_lib.lua's requeued_from).
local bad, back = check_end_report(base, rec, id, attempt, pilot)
if bad then return {'stale', bad} end

-- Read phase: which dependents does this release, and what do they need?
need(base .. K_WORK)
need_heads(base)
local release, pools = {}, {}
for _, d in ipairs(rec.dn or NONE) do
  local drec = load(KEYS[1], d)
  if drec and drec.s == 'blocked' and drec.nd == 1 and not drec.dx then
    pools[d] = pool_of(base, drec.t)
  end
end
local missing = needkeys()
if missing then return missing end

if back then take_back(base, rec, pilot) end
add_work(base, -work_of(rec))
fair_end(base, rec, now)
rec.s = 'done'
rec.te = now
count(base, 'ended:done', 1)
for k, v in pairs(result) do rec[k] = v end
save(KEYS[1], rec)
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('ZADD', KEYS[6], now, id)
if rec.w then
  if rec.k then redis.call('HSET', KEYS[7], rec.k, tostring(rec.w)) end
  if rec.ru then
    local s = {0, 0, 0, 0, 0, 0}
    local i = 0
    for word in string.gmatch(redis.call('HGET', KEYS[8], rec.ru) or '', '%S+') do i = i + 1 s[i] = tonumber(word) end
    s[1], s[2], s[3] = ete_step(s[1], s[2], s[3], rec.w)
    local hint = tonumber(rec.h)
    if hint and hint > 0 and rec.w > 0 then s[4], s[5], s[6] = ete_step(s[4], s[5], s[6], math.log(rec.w / hint)) end
    redis.call('HSET', KEYS[8], rec.ru, string.format('%d %.17g %.17g %d %.17g %.17g', s[1], s[2], s[3], s[4], s[5], s[6]))
  end
end
local out, releasing = {'ok'}, {}
for _, d in ipairs(rec.dn or NONE) do
  local drec = load(KEYS[1], d)
  if drec and drec.s == 'blocked' then
    drec.nd = (tonumber(drec.nd) or 1) - 1
    if drec.nd <= 0 then
      count_blocked(base, drec, -1)
      if drec.dx then
        drec.s = 'releasing'
        redis.call('ZADD', KEYS[5], now, d)
      else
        enqueue(base, KEYS[4], KEYS[5], drec, pools[d], now)
      end
      out[#out + 1] = d
      if drec.s == 'releasing' then releasing[#releasing + 1] = d end
    end
    save(KEYS[1], drec)
  end
end
moved(base, now, releasing)
return out
