-- heartbeat: a pilot renews the leases of the jobs it holds, reports what each payload has used so far,
-- and learns which of them to kill.
-- KEYS[1]  jobs hash
-- KEYS[2]  leases zset
-- KEYS[3]  kills hash (job id -> reason)
-- KEYS[4]  pilots hash (pilot id -> record JSON)
-- KEYS[5]  pilotseen zset (pilot id -> last heartbeat)
-- ARGV[1]  pilot id
-- ARGV[2]  now
-- ARGV[3]  lease length (seconds)
-- ARGV[4]  pilot record JSON ("" = keep the stored one)
-- ARGV[5..] job id, attempt, peak memory MB, CPU seconds, job id, ...: four per job; usage "" = not measured
--          yet. Usage is stored on the record (pm, cpu) only for the job's current attempt on this pilot.
-- Returns  {kills, lost}: kills = {id, reason, ...} to terminate; lost = {id, ...} no longer this pilot's
--          (requeued after an expired lease, or finished): the pilot must stop them without reporting.
local pilot, now, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], pilot, ARGV[4]) end
redis.call('ZADD', KEYS[5], now, pilot)
local kills, lost = {}, {}
for i = 5, #ARGV, 4 do
  local id, attempt = ARGV[i], ARGV[i + 1]
  local pm, cpu = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local rec = load(KEYS[1], id)
  if rec and rec.pl == pilot and check_report(rec, id, attempt, {'matched', 'running'}) == nil then
    redis.call('ZADD', KEYS[2], 'XX', now + lease, id)
    if pm and cpu and (rec.pm ~= pm or rec.cpu ~= cpu) then
      rec.pm, rec.cpu = pm, cpu
      save(KEYS[1], rec)
    end
    local reason = redis.call('HGET', KEYS[3], id)
    if reason then kills[#kills + 1] = id kills[#kills + 1] = reason end
  else
    lost[#lost + 1] = id
  end
end
return {kills, lost}
