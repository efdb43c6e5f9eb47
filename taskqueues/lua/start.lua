-- start: the pilot has started the payload of a job it matched (its usage so far is reset: heartbeat.lua
-- stores this attempt's).
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- ARGV[1]  job id   ARGV[2] attempt   ARGV[3] pilot id   ARGV[4] now   ARGV[5] lease length (seconds)
-- ARGV[6]  when the payload started (optional: a pilot may report a start a few milliseconds late,
--          together with other reports; default now)
-- Returns  {'ok'} or {'stale', reason}
local id, attempt, pilot, now = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local rec = load(KEYS[1], id)
local bad = check_report(rec, id, attempt, {'matched'})
if bad then return {'stale', bad} end
if rec.pl ~= pilot then return {'stale', 'job ' .. id .. ' is leased to ' .. tostring(rec.pl)} end
rec.s = 'running'
rec.st = tonumber(ARGV[6]) or now
rec.pm, rec.cpu = nil, nil -- an earlier attempt's usage; this one's comes with the heartbeats
save(KEYS[1], rec)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), id)
return {'ok'}
