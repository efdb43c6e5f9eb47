-- reap: requeue jobs whose lease expired (a pilot died or lost contact), with back-off and a retry limit,
-- and put back into their task queues the requeued jobs whose back-off is over.
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  delayed zset (job id -> time it may be matched again)
-- KEYS[4]  kills hash
-- KEYS[5]  tqempty zset
-- KEYS[6]  releasing zset
-- KEYS[7..] task queues, pools and heads indexes of the delayed jobs that are due
--           the work counter, the heads and qfloor hashes
-- ARGV[1]  key base   ARGV[2] now   ARGV[4] batch size
-- ARGV[5]  leases that expired before this time are requeued (optional, default now; "-inf" for none: the
--          grace after a server restart, while live pilots renew what the outage let expire)
-- ARGV[3]  back-off base (seconds): a job's first lease expiry requeues it at once (its pilot died: another
--          may take it now), the second waits the base, then twice as long at each retry
-- Returns  {'ok', requeued, failed, restored} or {'needkeys', key...}
local base, now, backoff, batch = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
declare_from(7)
need(base .. 'work')
need_heads(base)
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, batch)
local pools = {}
for _, id in ipairs(due) do
  local rec = load(KEYS[1], id)
  if rec then pools[id] = pool_of(base, rec.t) end
end
local missing = needkeys()
if missing then return missing end

local requeued, failed, restored = 0, 0, 0
local cutoff = ARGV[5] or ARGV[2]
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'LIMIT', 0, batch)) do
  redis.call('ZREM', KEYS[2], id)
  local rec = load(KEYS[1], id)
  if rec and (rec.s == 'matched' or rec.s == 'running') then
    local kill = redis.call('HGET', KEYS[4], id)
    redis.call('HDEL', KEYS[4], id)
    local lastpilot = tostring(rec.pl)
    rec.pl = nil
    if kill then
      finish(KEYS[1], KEYS[6], rec, rec.cx and 'cancelled' or 'failed', kill .. ' (pilot lost)', now)
      failed = failed + 1
    elseif (rec.rt or 0) >= rec.mr then
      finish(KEYS[1], KEYS[6], rec, 'failed', 'lease expired ' .. tostring((rec.rt or 0) + 1)
        .. ' times; last pilot ' .. lastpilot, now)
      failed = failed + 1
    else
      rec.rt = (rec.rt or 0) + 1
      rec.s = 'waiting'
      rec.why = 'lease expired on pilot ' .. lastpilot
      save(KEYS[1], rec)
      local delay = 0
      if rec.rt > 1 then delay = backoff * 2 ^ (rec.rt - 2) end
      redis.call('ZADD', KEYS[3], now + delay, id)
      requeued = requeued + 1
    end
  end
end
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[3], id)
  local rec = load(KEYS[1], id)
  if rec and rec.s == 'waiting' then
    enqueue(base, KEYS[5], KEYS[6], rec, pools[id], now)
    save(KEYS[1], rec)
    restored = restored + 1
  end
end
sync_heads(base)
wake(base)
return {'ok', requeued, failed, restored}
