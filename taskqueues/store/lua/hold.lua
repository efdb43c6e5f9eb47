-- hold: keep jobs from being matched (`pilotfish hold`), or give them back (`pilotfish release`).
-- Hold: a waiting job leaves its task queue (or its back-off) and the heads bookkeeping (touched/sync_heads),
-- so match.lua never sees it and it blocks no pilot; it is `held`, with who held it (hb) and why (why). A
-- blocked or releasing job keeps its state with a hold (ho): it becomes held instead of waiting when its
-- dependencies are done (_lib.lua's enqueue). Release: a held job enters its task queue again with the score it
-- had (its urgency); a pending hold is withdrawn.
-- KEYS[1]  jobs hash
-- KEYS[2]  delayed zset
-- KEYS[3]  tqempty zset
-- KEYS[4]  releasing zset
-- KEYS[5..] the task queues, pools and heads indexes of the jobs (or needkeys), the heads, qfloor, tqempty and
--           tqmax hashes, the held and events keys and the stats hash
-- ARGV[1]  key base   ARGV[2] now   ARGV[3] "hold" | "release"   ARGV[4] who   ARGV[5] reason ('' for none)
-- ARGV[6..] job ids (at most MAX_BATCH)
-- Returns  {'ok', outcome...}: one per job, in order: 'held', 'hold-pending' (blocked or releasing: held when
--          it would wait), 'released', or 'unknown' / the state that refuses it ('running', 'done'...; a job
--          already held is 'held' again, one not held is refused with its state); or {'needkeys', key...}
SCRIPT = 'hold'
local base = check_base({'jobs', 'delayed', 'tqempty', 'releasing'})
check_count(6)
local now = argv_number(2, 'now', 0, MAX_TIME)
local mode = ARGV[3]
if mode ~= 'hold' and mode ~= 'release' then problem('ARGV[3] (mode)', 'wants hold or release, got ' .. shown(mode)) end
local by, reason = argv_actor(4)
argv_job_ids(6)
if PROBLEM then return refused() end
declare_keys()
events_by(now, by)
need_heads(base)
need(base .. K_PARKED)
local recs, pools = {}, {}
for i = 6, #ARGV do
  local id = ARGV[i]
  local rec = load(KEYS[1], id)
  recs[i] = rec
  if rec and type(rec.t) == 'string' and rec.t ~= '' then
    if mode == 'hold' and rec.s == 'waiting' then need(base .. K_TQ .. rec.t) end
    if mode == 'release' and rec.s == 'held' then pools[i] = pool_of(base, rec.t) end
  end
end
local missing = needkeys()
if missing then return missing end

-- A hold set on (or withdrawn from) a job that does not wait: its state stays, so the event is written here.
local function note(id, rec, what)
  save(KEYS[1], rec)
  append_event(base, id, {{t = now, f = rec.s, s = rec.s, by = by, a = rec.a,
    why = what .. (reason ~= '' and ' (' .. reason .. ')' or '')}})
end
local out = {'ok'}
for i = 6, #ARGV do
  local id, rec = ARGV[i], recs[i]
  local outcome
  if not rec then
    outcome = 'unknown'
  elseif mode == 'hold' then
    if rec.s == 'waiting' then
      if type(rec.m) == 'string' and redis.call('ZREM', base .. K_TQ .. rec.t, rec.m) == 1 then touched(rec.t, nil) end
      redis.call('ZREM', KEYS[2], id)
      rec.s, rec.hb, rec.why, rec.lx, rec.ls = 'held', by, reason ~= '' and reason or nil, nil, nil
      save(KEYS[1], rec)
      outcome = 'held'
    elseif rec.s == 'blocked' or rec.s == 'releasing' then
      rec.ho, rec.hb = 1, by
      note(id, rec, 'hold: held as soon as it would wait')
      outcome = 'hold-pending'
    else
      outcome = rec.s
    end
  elseif rec.s == 'held' then
    if not enqueueable(rec) then
      park(base, id, 'its record cannot be read (released from a hold)', nil, nil, now)
      outcome = 'parked'
    else
      rec.hb = nil
      rec.why = nil
      EVENT_NOTE = reason ~= '' and reason or nil
      enqueue(base, KEYS[3], KEYS[4], rec, pools[i] or {}, now)
      save(KEYS[1], rec)
      EVENT_NOTE = nil
      outcome = 'released'
    end
  elseif rec.ho then
    rec.ho, rec.hb = nil, nil
    note(id, rec, 'release: its hold withdrawn')
    outcome = 'released'
  else
    outcome = rec.s
  end
  out[#out + 1] = outcome
end
sync_heads(base, now)
wake(base)
return out
