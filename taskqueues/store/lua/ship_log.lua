-- ship_log: a pilot ships the output of one attempt of a job's payload: new bytes of its stdout and stderr
-- (appended to what the attempt's tail already holds, keeping the last `cap` bytes of each stream), their
-- total sizes, and where the pilot keeps the files (keys.log: the job's log hash). Only for a job whose record
-- exists and an attempt it has had, so the log hash never outlives (or precedes) its job record.
-- KEYS[1]  jobs hash
-- KEYS[2]  the job's log hash (base .. K_LOG .. job id)
-- ARGV[1]  job id   ARGV[2] attempt   ARGV[3] pilot id   ARGV[4] now
-- ARGV[5]  cap: bytes kept per stream (at most 16 MiB)
-- ARGV[6]  where JSON {"host": text, "dir": text}: the pilot's node and its log directory
-- ARGV[7]  "1" while the payload runs (more may come), "0" for the attempt's final tail
-- ARGV[8..] triples: stream ("out" | "err"), new bytes (at most `cap`: the newest), the stream's total bytes
-- Returns  {'ok'} or {'stale', reason}
SCRIPT = 'ship_log'
base_of_jobs({'jobs'})
check_count(7)
local id = argv_text(1, 'job id', PATTERN.job, 64)
local attempt = argv_number(2, 'attempt', 0, 1e9, true)
local pilot = argv_text(3, 'pilot id', PATTERN.name, 256)
local now = argv_number(4, 'now', 0, MAX_TIME)
local cap = argv_number(5, 'cap', 0, 16 * 1024 * 1024, true)
local where = check_json('ARGV[6] (where)', ARGV[6])
if ARGV[7] ~= '0' and ARGV[7] ~= '1' then problem('ARGV[7] (live)', 'wants 0 or 1, got ' .. shown(ARGV[7])) end
if (#ARGV - 7) % 3 ~= 0 then problem('ARGV', 'wants triples (stream, bytes, total) after ARGV[7], got ' .. (#ARGV - 7) .. ' more') end
for i = 8, #ARGV, 3 do
  if ARGV[i] ~= 'out' and ARGV[i] ~= 'err' then problem('ARGV[' .. i .. '] (stream)', 'wants out or err, got ' .. shown(ARGV[i])) end
  if ARGV[i + 1] and #ARGV[i + 1] > cap then problem('ARGV[' .. (i + 1) .. '] (bytes)', 'holds ' .. #ARGV[i + 1] .. ' bytes, more than the cap ' .. cap) end
  if ARGV[i + 2] then argv_number(i + 2, 'total', 0, 1e18, true) end
end
if KEYS[2] ~= (string.match(tostring(KEYS[1]), '^(.*)jobs$') or '?') .. K_LOG .. tostring(ARGV[1]) then
  problem('KEYS[2]', 'wants the log hash of job ' .. shown(ARGV[1]) .. ', got ' .. shown(KEYS[2]))
end
if PROBLEM then return refused() end
local rec = load(KEYS[1], id)
if not rec then return {'stale', 'unknown job ' .. id} end
if attempt > rec.a then return {'stale', 'job ' .. id .. ' has had no attempt ' .. attempt} end
local prefix = string.format('%d:', attempt)
for i = 8, #ARGV, 3 do
  local field = prefix .. ARGV[i]
  local kept = redis.call('HGET', KEYS[2], field) or ''
  kept = kept .. ARGV[i + 1]
  if #kept > cap then kept = string.sub(kept, #kept - cap + 1) end
  redis.call('HSET', KEYS[2], field, kept, field .. ':n', ARGV[i + 2])
end
local host = type(where.host) == 'string' and string.sub(where.host, 1, 256) or ''
local dir = type(where.dir) == 'string' and string.sub(where.dir, 1, 4096) or ''
redis.call('HSET', KEYS[2], prefix .. 'meta', cjson.encode({pilot = pilot, host = host, dir = dir,
  live = tonumber(ARGV[7]), at = now}))
return {'ok'}
