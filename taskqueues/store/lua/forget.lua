-- forget: job retention. Forget one request whose every job ended before the cutoff: its job records, their
-- payload logs and events, their entries in the ended index, the done log and their rules' lists, their kill requests,
-- and the request record. With no request, forget those of the given jobs of no request that ended before
-- the cutoff and whose dependents have all ended (no release will read them), and index entries of no
-- record. A successful job is forgotten only once re-pressure has read it from the done log (its entry not
-- after the cursor hash's `repressure` field), so nothing it would learn from is lost; learnt run times
-- (etekeys, eterules) are kept.
-- KEYS[1]  jobs hash
-- KEYS[2]  requests hash
-- KEYS[3]  donelog zset
-- KEYS[4]  cursor hash
-- KEYS[5]  kills hash
-- KEYS[6..] the jobs' log hashes and their rules' byrule sets (asked for with needkeys), the ended and
--           endedby indexes, the requests hash, the notify hash, queue and watch zset and the stats hash, whose `forgotten` counter this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base   ARGV[2] cutoff (ended before this time)   ARGV[3] request id, or '' for jobs of no request
-- ARGV[4..] with no request: the job ids (at most MAX_BATCH)
-- Returns  {'ok', jobs forgotten} | {'kept', why} (the request is not forgettable yet) | {'needkeys', key...}
SCRIPT = 'forget'
local base = check_base({'jobs', 'requests', 'donelog', 'cursor', 'kills'})
check_count(3)
local cutoff = argv_number(2, 'cutoff', -MAX_TIME, MAX_TIME)
local request = ARGV[3]
if request ~= '' then request = argv_text(3, 'request id', PATTERN.request, 64) end
if request ~= '' and #ARGV > 3 then problem('ARGV', 'takes no job ids with a request') end
argv_job_ids(4)
if PROBLEM then return refused() end
declare_keys()
local learnt = tonumber(redis.call('HGET', KEYS[4], 'repressure') or '')

-- Why a job cannot be forgotten yet (nil: it can): ended before the cutoff, and read by re-pressure if done.
local function kept(id, rec)
  if not rec then return nil end
  if not FINAL_STATES[rec.s] then return 'job ' .. id .. ' is ' .. rec.s end
  local ended = tonumber(rec.te)
  if not ended or ended >= cutoff then return 'job ' .. id .. ' ended after the cutoff' end
  if rec.s == 'done' then
    local logged = tonumber(redis.call('ZSCORE', KEYS[3], id))
    if logged and not (learnt and logged <= learnt) then return 'job ' .. id .. ' is not learnt from yet' end
  end
  return nil
end

local ids, records = {}, {}
if request ~= '' then
  local raw = redis.call('HGET', KEYS[2], request)
  if not raw then return {'kept', 'no request ' .. request} end
  local rrec = json_object(raw)
  local first, last = rrec and tonumber(rrec.first), rrec and tonumber(rrec.last)
  if not first or not last or last < first or last - first >= MAX_BATCH then
    return {'kept', 'request ' .. request .. ' has no readable job range'}
  end
  for n = first, last do ids[#ids + 1] = string.format('%d', n) end
  for _, id in ipairs(ids) do
    local rec, bad = load(KEYS[1], id)
    if bad then return {'kept', 'job ' .. id .. ' is unreadable'} end
    local why = kept(id, rec)
    if why then return {'kept', why} end
    records[id] = rec or false
  end
else
  for i = 4, #ARGV do
    local id = ARGV[i]
    local rec, bad = load(KEYS[1], id)
    if not rec and not bad then -- an index entry of no record: nothing to keep it for
      redis.call('ZREM', base .. K_ENDED, id)
      redis.call('ZREM', KEYS[3], id)
    elseif rec and not rec.q and not kept(id, rec) then
      local open = false
      for _, d in ipairs(rec.dn or {}) do
        local drec = load(KEYS[1], d)
        if drec and not FINAL_STATES[drec.s] then open = true end
      end
      if not open then
        ids[#ids + 1] = id
        records[id] = rec
      end
    end
  end
end

for _, id in ipairs(ids) do
  need(base .. K_LOG .. id)
  local rec = records[id]
  if rec and type(rec.ru) == 'string' then need(base .. K_BYRULE .. rec.ru) end
end
local missing = needkeys()
if missing then return missing end

local n = 0
for _, id in ipairs(ids) do
  local rec = records[id]
  if rec then
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', base .. K_ENDED, id)
    redis.call('ZREM', base .. K_ENDEDBY, history_entries(base, rec, rec.s, rec.te))
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('DEL', base .. K_LOG .. id)
    redis.call('HDEL', base .. K_EVENTS, id)
    if type(rec.ru) == 'string' then redis.call('SREM', base .. K_BYRULE .. rec.ru, id) end
    n = n + 1
  end
end
if request ~= '' then
  redis.call('HDEL', KEYS[2], request)
  -- its webhook's notification (taskqueues/store/notices.py) goes with it
  redis.call('HDEL', base .. K_NOTIFY, request)
  redis.call('ZREM', base .. K_NOTIFYQ, request)
  redis.call('ZREM', base .. K_NOTIFYWATCH, request)
end
count(base, 'forgotten', n)
return {'ok', n}
