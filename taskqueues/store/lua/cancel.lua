-- cancel: stop a job. A waiting, blocked or releasing job ends at once (its dependents become dep-failed);
-- a matched or running one gets a kill request that its pilot's next heartbeat returns, and the pilot's
-- own channel (base .. K_CTL .. pilot, keys.pilot_channel) is published so that it heartbeats at once; the
-- pilot's report then ends it (as cancelled for "cancel", failed for "kill").
-- KEYS[1]  jobs hash
-- KEYS[2]  kills hash
-- KEYS[3]  delayed zset
-- KEYS[4]  releasing zset
-- KEYS[5..] the job's task queue, the heads, qfloor, tqempty and tqmax hashes (needed when it is waiting),
--           the work counter and the parked hash (a job that ends leaves it)
--           and the stats hash, whose counters this script adds to (taskqueues/stats.py)
-- ARGV[1]  key base   ARGV[2] job id   ARGV[3] "cancel" | "kill"   ARGV[4] reason   ARGV[5] now
-- ARGV[6]  who asks (optional: the events name it; default "cancel")
-- Returns  {'ended', state} | {'requested', state} | {'final', state} | {'unknown'} | {'needkeys', key}
SCRIPT = 'cancel'
local base = check_base({'jobs', 'kills', 'delayed', 'releasing'})
check_count(5)
if #ARGV > 6 then problem('ARGV', 'wants 5 or 6 arguments, got ' .. #ARGV) end
local id = argv_text(2, 'job id', PATTERN.job, 64)
local mode = ARGV[3]
if mode ~= 'cancel' and mode ~= 'kill' then problem('ARGV[3] (mode)', 'wants cancel or kill, got ' .. shown(mode)) end
local reason = argv_text(4, 'reason', nil, 4096)
local now = argv_number(5, 'now', 0, MAX_TIME)
local by = ARGV[6] and argv_text(6, 'who', PATTERN.name, 256) or 'cancel'
if PROBLEM then return refused() end
declare_keys()
events_by(now, by)
need(base .. K_WORK)
need(base .. K_PARKED)
local rec = load(KEYS[1], id)
if not rec then return {'unknown'} end
if rec.s == 'matched' or rec.s == 'running' then
  redis.call('HSET', KEYS[2], id, reason)
  if mode == 'cancel' then rec.cx = 1 save(KEYS[1], rec) end
  if rec.pl then redis.call('PUBLISH', base .. K_CTL .. rec.pl, 'kill') end
  return {'requested', rec.s}
end
if rec.s == 'waiting' or rec.s == 'blocked' or rec.s == 'releasing' then
  if rec.s == 'waiting' then
    need(base .. K_TQ .. rec.t)
    need_heads(base)
  end
  local missing = needkeys()
  if missing then return missing end
  if rec.s == 'waiting' then
    redis.call('ZREM', base .. K_TQ .. rec.t, rec.m)
    redis.call('ZREM', KEYS[3], id)
    touched(rec.t, nil)
    sync_heads(base, now)
  end
  redis.call('HDEL', base .. K_PARKED, id)
  finish(KEYS[1], KEYS[4], rec, 'cancelled', reason, now)
  return {'ended', 'cancelled'}
end
return {'final', rec.s}
