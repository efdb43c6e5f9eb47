-- cancel: stop a job. A waiting, blocked or releasing job ends at once (its dependents become dep-failed);
-- a matched or running one gets a kill request that its pilot's next heartbeat returns, and the pilot's
-- own channel (base .. 'ctl:' .. pilot, keys.pilot_channel) is published so that it heartbeats at once; the
-- pilot's report then ends it (as cancelled for "cancel", failed for "kill").
-- KEYS[1]  jobs hash
-- KEYS[2]  kills hash
-- KEYS[3]  delayed zset
-- KEYS[4]  releasing zset
-- KEYS[5..] the job's task queue, the heads and qfloor hashes (needed when it is waiting)
--           and the work counter
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] "cancel" | "kill"   ARGV[4] reason   ARGV[5] now
-- Returns  {'ended', state} | {'requested', state} | {'final', state} | {'unknown'} | {'needkeys', key}
local base, id, mode, reason, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
declare_from(5)
need(base .. 'work')
local rec = load(KEYS[1], id)
if not rec then return {'unknown'} end
if rec.s == 'matched' or rec.s == 'running' then
  redis.call('HSET', KEYS[2], id, reason)
  if mode == 'cancel' then rec.cx = 1 save(KEYS[1], rec) end
  if rec.pl then redis.call('PUBLISH', base .. 'ctl:' .. rec.pl, 'kill') end
  return {'requested', rec.s}
end
if rec.s == 'waiting' or rec.s == 'blocked' or rec.s == 'releasing' then
  if rec.s == 'waiting' then
    need(base .. 't:' .. rec.t)
    need_heads(base)
    local missing = needkeys()
    if missing then return missing end
    redis.call('ZREM', base .. 't:' .. rec.t, rec.m)
    redis.call('ZREM', KEYS[3], id)
    touched(rec.t, nil)
    sync_heads(base)
  end
  finish(KEYS[1], KEYS[4], rec, 'cancelled', reason, now)
  return {'ended', 'cancelled'}
end
return {'final', rec.s}
