-- resubmit: ended jobs run again as a new attempt (`pilotfish resubmit`). Each named job must have ended
-- (done, failed or cancelled); the call is refused, nothing changed, naming the first job that has not (or a
-- dep-failed one: its dependency is what to resubmit), or a job whose dependency ended without success and is
-- not resubmitted with it. Its dep-failed dependents (transitively) come back with it, blocked until it is
-- done again, unless another of their dependencies failed and is not resubmitted. A blocked dependent of a
-- done job resubmitted waits for it again. Each job comes back as its dependencies allow: blocked (nd counts
-- those not done), releasing (its requirements wait for its dependencies' outputs: evaluated again), or
-- waiting in its task queue with the score it had; attempt numbers go on (match counts them up), and the logs
-- of earlier attempts stay (keys.py's log:<job>). The retries it had used are given back.
-- KEYS[1]  jobs hash
-- KEYS[2]  tqempty zset
-- KEYS[3]  releasing zset
-- KEYS[4]  kills hash
-- KEYS[5..] task queues, pools and heads indexes of the jobs that wait again, their rules' byrule sets (or
--           needkeys), the work counter, the heads, qfloor, tqempty and tqmax hashes, the held, events,
--           ended and blocked keys and the stats hash, the requests hash and the notify watch zset, hash and
--           queue zset (a request with a webhook is armed again)
-- ARGV[1]  key base   ARGV[2] now   ARGV[3] who   ARGV[4] reason ('' for none)   ARGV[5..] job ids (at most
--          MAX_BATCH)
-- Returns  {'ok', id...}: every job that came back, the named ones first; {'refused', job id, reason};
--          or {'needkeys', key...}
SCRIPT = 'resubmit'
local base = check_base({'jobs', 'tqempty', 'releasing', 'kills'})
check_count(5)
local now = argv_number(2, 'now', 0, MAX_TIME)
local by, reason = argv_actor(3)
argv_job_ids(5)
if PROBLEM then return refused() end
declare_keys()
events_by(now, by)
need(base .. K_WORK)
need_heads(base)

local AGAIN = {done = true, failed = true, cancelled = true}
-- Whether a record can wait again: it has a task-queue member, or requirements evaluated at release.
local function runnable(rec)
  return rec.df ~= nil or enqueueable(rec)
end
local recs, order, named, cause = {}, {}, {}, {}
local function get(id)
  if recs[id] == nil then recs[id] = load(KEYS[1], id) or false end
  return recs[id]
end
for i = 5, #ARGV do
  local id = ARGV[i]
  local rec = get(id)
  if not rec then return {'refused', id, 'no job ' .. id} end
  if rec.s == 'dep-failed' then
    return {'refused', id, 'job ' .. id .. ' is dep-failed (' .. tostring(rec.why) .. '): resubmit the job it waited for'}
  end
  if not AGAIN[rec.s] then
    return {'refused', id, 'job ' .. id .. ' is ' .. rec.s .. ': only a job that ended (done, failed, cancelled) '
      .. 'is resubmitted'}
  end
  if not runnable(rec) then
    return {'refused', id, 'job ' .. id .. ' failed before it had a task queue (' .. tostring(rec.why)
      .. '): submit it again'}
  end
  if not named[id] then
    named[id] = true
    order[#order + 1] = id
  end
end
-- Their dep-failed dependents, transitively (through jobs that come back only).
local revive = {}
for _, id in ipairs(order) do revive[id] = true end
local i = 1
while i <= #order do
  local rec = recs[order[i]]
  for _, d in ipairs(rec.dn or {}) do
    local drec = get(d)
    if drec and drec.s == 'dep-failed' and not revive[d] and runnable(drec) then
      revive[d] = true
      cause[d] = order[i]
      order[#order + 1] = d
    end
  end
  i = i + 1
end
-- Each job's dependencies not done: waited for again if they come back or have not ended; one that ended
-- without success and does not come back keeps the job out (a dependent), or refuses the call (a named job).
local pending = {}
local changed = true
while changed do
  changed = false
  for _, id in ipairs(order) do
    if revive[id] then
      local n = 0
      for _, p in ipairs(recs[id].dp or {}) do
        local prec = get(p)
        if prec and not revive[p] and FINAL_STATES[prec.s] and prec.s ~= 'done' then
          if named[id] then
            return {'refused', id, 'job ' .. id .. ' depends on job ' .. p .. ', which is ' .. prec.s
              .. ': resubmit it too'}
          end
          revive[id] = false
          changed = true
          break
        end
        if not prec or revive[p] or prec.s ~= 'done' then n = n + 1 end
      end
      pending[id] = n
    end
  end
end
local pools = {}
for _, id in ipairs(order) do
  local rec = recs[id]
  if revive[id] then
    if pending[id] == 0 and not rec.df then pools[id] = pool_of(base, rec.t) end
    if type(rec.ru) == 'string' then need(base .. K_BYRULE .. rec.ru) end
  end
end
-- A request with a webhook ends again when its jobs that come back do (see the end of this script).
local REARM = {base .. K_REQUESTS, base .. K_NOTIFYWATCH, base .. K_NOTIFY, base .. K_NOTIFYQ}
for _, k in ipairs(REARM) do need(k) end
local missing = needkeys()
if missing then return missing end

-- A blocked dependent of a done job that runs again waits for it again.
for _, id in ipairs(order) do
  if revive[id] and recs[id].s == 'done' then
    for _, d in ipairs(recs[id].dn or {}) do
      local drec = get(d)
      if drec and not revive[d] and drec.s == 'blocked' then
        drec.nd = (tonumber(drec.nd) or 0) + 1
        save(KEYS[1], drec)
      end
    end
  end
end
local out, releasing = {'ok'}, {}
for _, id in ipairs(order) do
  local rec = recs[id]
  if revive[id] then
    add_work(base, work_of(rec))
    rec.te, rec.x, rec.w, rec.cpu, rec.pm, rec.st, rec.tm, rec.pl = nil, nil, nil, nil, nil, nil, nil, nil
    rec.lx, rec.ls, rec.cx, rec.rt, rec.rr, rec.why, rec.ho, rec.hb = nil, nil, nil, nil, nil, nil, nil, nil
    if rec.df then rec.dx = 1 end -- its requirements are evaluated again from the new outputs
    redis.call('HDEL', KEYS[4], id)
    if type(rec.ru) == 'string' then redis.call('SADD', base .. K_BYRULE .. rec.ru, id) end
    EVENT_NOTE = named[id] and (reason ~= '' and reason or 'resubmitted')
      or ('dependency ' .. tostring(cause[id]) .. ' resubmitted')
    if pending[id] > 0 then
      rec.nd = pending[id]
      rec.s = 'blocked'
      count_blocked(base, rec, 1)
    elseif rec.dx then
      rec.nd = nil
      rec.s = 'releasing'
      redis.call('ZADD', KEYS[3], now, id)
      releasing[#releasing + 1] = id
    else
      rec.nd = nil
      enqueue(base, KEYS[2], KEYS[3], rec, pools[id], now)
    end
    save(KEYS[1], rec)
    EVENT_NOTE = nil
    count(base, 'resubmitted', 1)
    out[#out + 1] = id
  end
end
moved(base, now, releasing)
-- Each request with a webhook whose jobs came back is armed again, at this time: the notifier counts its jobs'
-- ends from the first again (one seen ended may run again), and its end makes a notification due again
-- (notify.lua's ready). The notification of its last end, if any, waits again: not sent yet, it is dropped
-- (its end is over), and the number of ends it told is kept, so the next one is told as a later end.
local armed = {}
for _, id in ipairs(order) do
  local q = revive[id] and recs[id].q
  if type(q) == 'string' and not armed[q] then
    armed[q] = true
    local request = json_object(redis.call('HGET', REARM[1], q))
    if request and type(request.notify) == 'string' then
      local was = tonumber(redis.call('ZSCORE', REARM[2], q))
      redis.call('ZADD', REARM[2], (was and was >= now) and was + 0.001 or now, q) -- a new time, even on a clock that stands
      local note = json_object(redis.call('HGET', REARM[3], q))
      if note then
        redis.call('HSET', REARM[3], q, cjson.encode({url = request.notify, state = 'waiting',
          ends = tonumber(note.ends) or 1}))
        redis.call('ZREM', REARM[4], q)
      end
    end
  end
end
return out
