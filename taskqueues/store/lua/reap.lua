-- reap: requeue jobs whose lease expired (a pilot died or lost contact), with back-off and a retry limit,
-- and put back into their task queues the requeued jobs whose back-off is over.
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  delayed zset (job id -> time it may be matched again)
-- KEYS[4]  kills hash
-- KEYS[5]  tqempty zset
-- KEYS[6]  releasing zset
-- KEYS[7..] task queues, pools and heads indexes of the delayed jobs that are due
--           the work counter, the heads, qfloor, tqempty and tqmax hashes, the parked hash
--           and the stats hash, whose counters this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base   ARGV[2] now   ARGV[4] batch size
-- ARGV[3]  back-off base (seconds): a job's first lease expiry requeues it at once (its pilot died: another
--          may take it now), the second waits the base, then twice as long at each retry
-- ARGV[5]  leases that expired before this time are requeued (optional, default now; "-inf" for none: the
--          grace after a server restart, while live pilots renew what the outage let expire)
-- A lease taken under a shares policy gives its cores back to the fair hash's counters (fair_end, _lib.lua).
-- Returns  {'ok', requeued, failed, restored} or {'needkeys', key...}
-- A leased or delayed job whose record cannot be read is parked (see _lib.lua's park).
SCRIPT = 'reap'
local base = check_base({'jobs', 'leases', 'delayed', 'kills', 'tqempty', 'releasing'})
check_count(4)
if #ARGV > 5 then problem('ARGV', 'wants 4 or 5 arguments, got ' .. #ARGV) end
local now = argv_number(2, 'now', 0, MAX_TIME)
local backoff = argv_number(3, 'back-off', 0, 1e7)
local batch = argv_number(4, 'batch size', 1, MAX_BATCH, true)
local upto = ARGV[5] ~= nil and ARGV[5] ~= '-inf' and argv_number(5, 'lease cutoff', 0, MAX_TIME)
if PROBLEM then return refused() end
events_by(now, 'reaper')
local cutoff = ARGV[5] == '-inf' and '-inf' or string.format('%.17g', upto or now)
declare_keys()
need(base .. K_WORK)
need(base .. K_PARKED)
need_heads(base)
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%.17g', now), 'LIMIT', 0, batch)
local pools = {}
for _, id in ipairs(due) do
  local rec = load(KEYS[1], id)
  if rec and rec.t then pools[id] = pool_of(base, rec.t) end
end
local missing = needkeys()
if missing then return missing end

local requeued, failed, restored = 0, 0, 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'LIMIT', 0, batch)) do
  redis.call('ZREM', KEYS[2], id)
  local rec, unreadable = load(KEYS[1], id)
  if unreadable then park(base, id, 'its record cannot be read (its lease expired)', nil, nil, now) end
  if rec and (rec.s == 'matched' or rec.s == 'running') then
    count(base, 'lease_expired', 1)
    local kill = redis.call('HGET', KEYS[4], id)
    redis.call('HDEL', KEYS[4], id)
    local lastpilot, laststate = rec.pl, rec.s
    rec.pl = nil
    fair_end(base, rec, now)
    if kill then
      finish(KEYS[1], KEYS[6], rec, rec.cx and 'cancelled' or 'failed', kill .. ' (pilot lost)', now)
      failed = failed + 1
    elseif (rec.rt or 0) >= rec.mr then
      finish(KEYS[1], KEYS[6], rec, 'failed', 'lease expired ' .. tostring((rec.rt or 0) + 1)
        .. ' times; last pilot ' .. tostring(lastpilot), now)
      failed = failed + 1
    else
      rec.rt = (rec.rt or 0) + 1
      rec.s = 'waiting'
      rec.why = 'lease expired on pilot ' .. tostring(lastpilot)
      rec.lx, rec.ls = lastpilot, laststate -- _lib.lua's requeued_from: that pilot may still take it back
      save(KEYS[1], rec)
      local delay = 0
      if rec.rt > 1 then delay = math.min(backoff * 2 ^ (rec.rt - 2), MAX_TIME) end
      redis.call('ZADD', KEYS[3], now + delay, id)
      requeued = requeued + 1
      count(base, 'retries', 1)
    end
  end
end
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[3], id)
  local rec, unreadable = load(KEYS[1], id)
  if unreadable or (rec and rec.s == 'waiting' and not enqueueable(rec)) then
    park(base, id, 'its record cannot be read (its back-off ended)', nil, nil, now)
  elseif rec and rec.s == 'waiting' then
    enqueue(base, KEYS[5], KEYS[6], rec, pools[id], now)
    save(KEYS[1], rec)
    restored = restored + 1
  end
end
sync_heads(base, now)
wake(base)
return {'ok', requeued, failed, restored}
