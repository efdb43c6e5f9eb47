-- start: the pilot has started the payload of a job it matched (its usage so far is reset: heartbeat.lua
-- stores this attempt's).
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- ARGV[1]  job id   ARGV[2] attempt   ARGV[3] pilot id   ARGV[4] now   ARGV[5] lease length (seconds)
-- ARGV[6]  when the payload started (optional: a pilot may report a start a few milliseconds late,
--          together with other reports; default now)
-- A job the reaper requeued from this pilot's lease of this attempt before it started, and nobody matched
-- since (the store was paused longer than the lease), is taken back first (_lib.lua's requeued_from): KEYS
-- then also hold its task queue, the delayed, releasing and parked keys and the heads hashes (or needkeys).
-- Returns  {'ok'} or {'stale', reason} or {'needkeys', key...}
SCRIPT = 'start'
local base = base_of_jobs({'jobs', 'leases'})
check_count(5)
if #ARGV > 6 then problem('ARGV', 'wants 5 or 6 arguments, got ' .. #ARGV) end
local id = argv_text(1, 'job id', PATTERN.job, 64)
local attempt = argv_number(2, 'attempt', 0, 1e9, true)
local pilot = argv_text(3, 'pilot id', PATTERN.name, 256)
local now = argv_number(4, 'now', 0, MAX_TIME)
local lease = argv_number(5, 'lease length', 0, MAX_TIME)
if lease <= 0 then problem('ARGV[5] (lease length)', 'wants a positive length, got ' .. shown(ARGV[5])) end
local started = now
if ARGV[6] ~= nil and ARGV[6] ~= '' then started = argv_number(6, 'started', 0, MAX_TIME) end
if PROBLEM then return refused() end
declare_keys()
events_by(now, 'pilot ' .. pilot)
local rec = load(KEYS[1], id)
local back = requeued_from(rec, attempt, pilot) and rec.ls == 'matched'
if back then
  need_back(base, rec)
  local missing = needkeys()
  if missing then return missing end
  take_back(base, rec, pilot)
  sync_heads(base, now)
else
  local bad = check_report(rec, id, attempt, {'matched'})
  if bad then return {'stale', bad} end
  if rec.pl ~= pilot then return {'stale', 'job ' .. id .. ' is leased to ' .. tostring(rec.pl)} end
end
rec.s = 'running'
rec.st = started
rec.pm, rec.cpu = nil, nil -- an earlier attempt's usage; this one's comes with the heartbeats
save(KEYS[1], rec)
redis.call('ZADD', KEYS[2], now + lease, id)
return {'ok'}
