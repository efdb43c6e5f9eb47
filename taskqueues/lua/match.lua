-- match: lease to one pilot the most urgent task-queue head that fits what it has free; optionally repeat
-- until nothing more fits (fill a multi-core pilot in one call).
-- KEYS[1]  jobs hash
-- KEYS[2]  qh zset of the pilot's queue (task-queue id -> score, never above the real head score)
-- KEYS[3]  leases zset (job id -> expiry)
-- KEYS[4]  tqempty zset
-- KEYS[5]  heads hash (task-queue id -> "<score> <member> <floor>": its exact head; see _lib.lua)
-- KEYS[6]  qfloor hash (queue -> "cpu:mem:tmp:need" at or below every job its index can reach)
-- The task-queue zsets it touches (the one it leases from; one whose index entry has no heads entry) are
-- not declared: it builds their keys from the key base, which carries the community's hash tag, so they hash
-- to the slot of every declared key, and Redis (standalone, or a Cluster node serving that slot) serves them
-- (tests/test_keys.py runs a community on a real two-node Cluster).
-- Declaring every task queue the queue can see (argument parsing and building KEYS), for the one or two a
-- call touches, was a fifth of a filling call's instructions and a third of a one-job call's when a queue
-- sees 100 task queues (scripts/count_match.py, rows 1000:fill and 1000:one).
-- The hot path: this script does not use the shared prelude (no closures to build per call). It reads the
-- heads hash, never a task-queue zset, to decide: only the task queue it leases from is touched. The index
-- is read once per call, a page at a time, into one flat table; every write to the index, the heads, the
-- records and the leases is made once at the end, one command each, however many jobs the call leased.
-- Tables, closures and their upvalues cost as much as Redis commands here: few of each, and one loop.
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  pilot id
-- ARGV[3]  now (unix seconds)
-- ARGV[4]  lease length (seconds)
-- ARGV[5]  free cores      ARGV[6] free memory (MB)      ARGV[7] free scratch (MB)
-- ARGV[8]  seconds left (negative = unbounded), compared with each member's need: the seconds the job must
--          find left, its wall or its estimate with a safety factor (taskqueues.records.time_needed)
-- ARGV[9]  how many jobs at most
-- Returns  {id1, record1, id2, record2, ...} (records as stored after the lease: without their id, with the
--          member's tail as mt; see _lib.lua's load/save)
local base, pilot = ARGV[1], ARGV[2]
local cpu, mem, tmp, left = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local want = tonumber(ARGV[9])
local jobs, qh, heads, qfloor = KEYS[1], KEYS[2], KEYS[5], KEYS[6]
local queue = string.sub(qh, #base + 4)
local EMPTY, EMPTY_TEXT = 1e18, '1e18'

-- What a lease adds to a record, its time and expiry: made at the first lease (a call that leases nothing,
-- as for a pilot that nothing fits, costs little more than a trivial script).
local now, lease, expiry
-- The lease, as cjson would write it, without decoding the record: cjson writes no blanks and nested JSON
-- is kept as text, so '"s":"waiting"', '"a":' and '"tm":' can only be the record's own fields. Plain finds
-- and one splice (pattern scans over the whole text cost more than cjson). Any other form: decode/encode.
local function leased(raw)
  local s = string.find(raw, '"s":"waiting"', 1, true)
  if s and not string.find(raw, '"pl":', 1, true) and not string.find(raw, '"tm":', 1, true) then
    local a = string.find(raw, '"a":', 1, true)
    local digits = a and string.match(raw, '^%d+', a + 4)
    if not a or digits then
      -- 'waiting' and 'matched' have the same length: the attempt's position stays valid
      raw = string.sub(raw, 1, s + 4) .. 'matched' .. string.sub(raw, s + 12, -2)
      if not a then return raw .. ',"a":1' .. lease end
      return string.sub(raw, 1, a + 3) .. (tonumber(digits) + 1) .. string.sub(raw, a + 4 + #digits) .. lease
    end
  end
  local rec = cjson.decode(raw)
  rec.s = 'matched'
  rec.a = (rec.a or 0) + 1
  rec.pl = pilot
  rec.tm = now
  return cjson.encode(rec)
end

local floor_text = redis.call('HGET', qfloor, queue)
local f1, f2, f3, f4
if floor_text then
  f1, f2, f3, f4 = string.match(floor_text, '^([^:]+):([^:]+):([^:]+):([^:]+)$')
  f1, f2, f3, f4 = tonumber(f1), tonumber(f2), tonumber(f3), tonumber(f4)
end

-- The index entries read so far, in index order, 7 slots each: entry i starts at slot x = 7 * (i - 1) and
-- holds its task queue (x+1), its real head's score (x+2, EMPTY once the task queue has none) and heads
-- entry (x+3), and that head's exact cpu, mem, tmp and need (x+4..x+7), false until an entry
-- first could beat the best so far: parsing numbers (strtod) and captures were most of a match's cost.
-- Every entry not read yet has an index score, hence a real score, at or above `bound`; `all` once none
-- is left. A page has room for every job still wanted and two more, twice as much each time a page in a
-- row brings nothing that can be taken yet (every entry read costs a reply, a string and a strtod).
local X = {}
local n, bound, all = 0, -EMPTY, false
-- Writes, made at the end: index scores raised to their task queue's real head score (or to EMPTY) and
-- heads entries set, as (score, task queue) and (task queue, entry) pairs; heads entries deleted; task
-- queues that emptied, as (now, task queue); leases, as (expiry, job). A task queue named twice in one
-- command ends with the later value, which is the later one here too.
local zq, hs, hd, ze, ex = {}, {}, {}, {}, {}
local out = {}
local ids = {}  -- the jobs leased, whose records are read, leased and written back at the end
local got = 0

while got < want do
  if f1 and (cpu < f1 or mem < f2 or tmp < f3 or (left >= 0 and left < f4)) then break end
  -- The entry of the most urgent head that fits what is free (ties go to the smaller task-queue id, as
  -- ZRANGE orders equal scores), reading pages until no entry left unread can beat it.
  local b
  local size = want - got + 2
  while true do
    b = nil
    for x = 0, 7 * (n - 1), 7 do
      local r = X[x + 2]
      if r < EMPTY and (not b or r <= X[b + 2]) then
        local c = X[x + 4]
        if not c then
          local c1, m1, t1, e1 = string.match(X[x + 3], '^%S+ [^:]+:([^:]+):([^:]+):([^:]+):(%S+)')
          c = tonumber(c1)
          X[x + 4], X[x + 5], X[x + 6], X[x + 7] = c, tonumber(m1), tonumber(t1), tonumber(e1)
        end
        if c <= cpu and X[x + 5] <= mem and X[x + 6] <= tmp and (left < 0 or X[x + 7] <= left)
            and (not b or r < X[b + 2] or X[x + 1] < X[b + 1]) then
          b = x
        end
      end
    end
    if b and (all or X[b + 2] < bound) then break end
    b = nil
    if all then
      -- Nothing fits, and every non-empty task queue of the index was read: the queue's floor is theirs.
      f1, f2, f3, f4 = EMPTY, EMPTY, EMPTY, EMPTY
      for x = 0, 7 * (n - 1), 7 do
        if X[x + 2] < EMPTY then
          local g1, g2, g3, g4 = string.match(X[x + 3], '^%S+ %S+ ([^:]+):([^:]+):([^:]+):([^:]+)$')
          f1, f2, f3, f4 = math.min(f1, tonumber(g1)), math.min(f2, tonumber(g2)),
              math.min(f3, tonumber(g3)), math.min(f4, tonumber(g4))
        end
      end
      local text = string.format('%.17g:%.17g:%.17g:%.17g', f1, f2, f3, f4)
      if text ~= floor_text then redis.call('HSET', qfloor, queue, text) floor_text = text end
      break
    end
    -- The next page of the index (entries below EMPTY only), and the heads of its task queues in one
    -- HMGET. An entry without a heads entry (its task queue emptied through another queue, or its members
    -- predate the heads hash) is mended from its zset. Of a full page only the last index score is read
    -- (Redis formats every score it replies with): it bounds the entries not read yet, and an entry whose
    -- real score is past it has a stale index score, raised so that later walks find it in its place. A
    -- page that is not full ends the index: no bound is needed, and every walk reads all of it anyway.
    local page = redis.call('ZRANGEBYSCORE', qh, '-inf', '(1e18', 'LIMIT', n, size)
    local k = #page
    if k < size then all = true end
    if k > 0 then
      local x0 = 7 * n
      local last = all and EMPTY or tonumber(redis.call('ZSCORE', qh, page[k]))
      local entries = redis.call('HMGET', heads, unpack(page))
      for i = 1, k do
        local x, tq, entry = x0 + 7 * (i - 1), page[i], entries[i]
        X[x + 1], X[x + 4], X[x + 5], X[x + 6], X[x + 7] = tq, false, false, false, false
        if not entry then
          local head = redis.call('ZRANGE', base .. 't:' .. tq, '0', '0', 'WITHSCORES')
          if #head == 0 then
            X[x + 2], X[x + 3] = EMPTY, false
            zq[#zq + 1] = EMPTY_TEXT zq[#zq + 1] = tq
          else
            entry = head[2] .. ' ' .. head[1] .. ' 0:0:0:0'
            hs[#hs + 1] = tq hs[#hs + 1] = entry
          end
        end
        if entry then
          local text = string.match(entry, '^%S+')
          local r = tonumber(text)
          X[x + 2], X[x + 3] = r, entry
          if r > last then zq[#zq + 1] = text zq[#zq + 1] = tq end
        end
      end
      n = n + k
      bound = last
      size = size * 2
    end
  end
  if not b then break end
  -- Lease the head of entry b: take it out of its task queue, whose next head replaces it in entry b.
  local tq = X[b + 1]
  local key = base .. 't:' .. tq
  cpu, mem, tmp = cpu - X[b + 4], mem - X[b + 5], tmp - X[b + 6]
  local member, fl = string.match(X[b + 3], '^%S+ (%S+) (%S+)$')
  redis.call('ZREM', key, member)
  local head = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if #head == 0 then
    X[b + 2] = EMPTY
    zq[#zq + 1] = EMPTY_TEXT zq[#zq + 1] = tq
    hd[#hd + 1] = tq
    ze[#ze + 1] = ARGV[3] ze[#ze + 1] = tq
  else
    local entry = head[2] .. ' ' .. head[1] .. ' ' .. fl
    X[b + 2], X[b + 3], X[b + 4] = tonumber(head[2]), entry, false
    zq[#zq + 1] = head[2] zq[#zq + 1] = tq
    hs[#hs + 1] = tq hs[#hs + 1] = entry
  end
  if not now then
    now = tonumber(ARGV[3])
    lease = ',"pl":' .. cjson.encode(pilot) .. ',"tm":' .. cjson.encode(now) .. '}'
    expiry = string.format('%.17g', now + tonumber(ARGV[4]))
  end
  local id = string.match(member, '^([^:]+):')
  got = got + 1
  ids[got] = id
  ex[#ex + 1] = expiry ex[#ex + 1] = id
end

if #hs > 0 then redis.call('HSET', heads, unpack(hs)) end
if #hd > 0 then redis.call('HDEL', heads, unpack(hd)) end
if #zq > 0 then redis.call('ZADD', qh, unpack(zq)) end
if #ze > 0 then redis.call('ZADD', KEYS[4], 'NX', unpack(ze)) end
if got > 0 then
  local raws = redis.call('HMGET', jobs, unpack(ids))
  for i = 1, got do
    out[2 * i - 1] = ids[i]
    out[2 * i] = leased(raws[i])
  end
  redis.call('HSET', jobs, unpack(out))
  redis.call('ZADD', KEYS[3], unpack(ex))
end
return out
