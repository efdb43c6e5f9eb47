-- match: lease to one pilot the most urgent task-queue head that fits what it has free; optionally repeat
-- until nothing more fits (fill a multi-core pilot in one call).
-- KEYS[1]  jobs hash
-- KEYS[2]  qh zset of the pilot's queue (task-queue id -> score, never above the real head score)
-- KEYS[3]  leases zset (job id -> expiry)
-- KEYS[4]  tqempty zset
-- KEYS[5]  heads hash (task-queue id -> "<score> <member> <floor>": its exact head; see _lib.lua)
-- KEYS[6]  qfloor hash (queue -> "cpu:mem:tmp:ete" at or below every job its index can reach)
-- KEYS[7..] the task-queue zsets the caller believes its queue can see, SORTED; the chosen task queue's key
--           (or, for an index entry without a heads entry, that entry's key) when not declared is returned
--           as {'needkeys', key} before anything is written; after a lease, the call ends there and answers
--           'more' instead of 'ok' (the caller declares the task queues anew and asks for the rest)
-- The hot path: this script does not use the shared prelude (no closures to build per call), and looks
-- declared keys up by binary search in the sorted KEYS instead of building a table of them. It reads the
-- heads hash, never a task-queue zset, to decide: only the task queue it leases from is touched.
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  pilot id
-- ARGV[3]  now (unix seconds)
-- ARGV[4]  lease length (seconds)
-- ARGV[5]  free cores      ARGV[6] free memory (MB)      ARGV[7] free scratch (MB)
-- ARGV[8]  seconds left (negative = unbounded)
-- ARGV[9]  how many jobs at most
-- Returns  {'ok' | 'more', id1, record1, id2, record2, ...} (records as stored after the lease: without their
--          id, with the member's tail as mt; see _lib.lua's load/save) or {'needkeys', key}
local base, pilot, now, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local cpu, mem, tmp, left = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local want = tonumber(ARGV[9])
local qh, heads, qfloor = KEYS[2], KEYS[5], KEYS[6]
local queue = string.sub(qh, #base + 4)
local EMPTY, EMPTY_TEXT = 1e18, '1e18'

local function declared(key)
  local lo, hi = 7, #KEYS
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local k = KEYS[mid]
    if k == key then return true end
    if k < key then lo = mid + 1 else hi = mid - 1 end
  end
  return false
end

local floor_text = redis.call('HGET', qfloor, queue)
local floor
if floor_text then
  local c, m, t, e = string.match(floor_text, '^([^:]+):([^:]+):([^:]+):([^:]+)$')
  floor = {tonumber(c), tonumber(m), tonumber(t), tonumber(e)}
end

-- Index entries to raise to their task queue's real head score (or to EMPTY), written once a lease is sure.
local raise = {}

-- Walk the index in score order, a page at a time, reading the pages' heads in one HMGET. Index scores are
-- at or below the real ones, so once an index score passes the best fitting head's real score, nothing
-- further can beat it (ties go to the smaller task-queue id, as ZRANGE orders equal scores). A walk that
-- finds nothing has seen every non-empty task queue of the index: it sets the queue's floor from theirs.
-- An index entry below EMPTY without a heads entry (its task queue emptied through another queue, or its
-- members predate the heads hash) is mended from its zset. Plain loops and locals, no tables or closures
-- per entry: allocation and Lua's collector were a third of the server time of a match.
-- Returns the chosen task queue, its score, member, cpu, mem, tmp, floor; or nil; or false, missing key.
local function pick()
  if floor and (cpu < floor[1] or mem < floor[2] or tmp < floor[3] or (left >= 0 and left < floor[4])) then
    return nil
  end
  local btq, bscore, bmember, bc, bm, bt, bfloor
  local f1, f2, f3, f4 = EMPTY, EMPTY, EMPTY, EMPTY
  local start, size = 0, 4
  while true do
    local page = redis.call('ZRANGE', qh, start, start + size - 1, 'WITHSCORES')
    local n = #page / 2
    if n == 0 then break end
    local tqs = {}
    for i = 1, n do tqs[i] = page[2 * i - 1] end
    local entries = redis.call('HMGET', heads, unpack(tqs))
    local stop = false
    for i = 1, n do
      local tq, sidx = tqs[i], tonumber(page[2 * i])
      if sidx >= EMPTY or (btq and sidx > bscore) then stop = true break end
      local entry = entries[i]
      if not entry then
        local key = base .. 't:' .. tq
        if not declared(key) then return false, key end
        local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        if #head == 0 then
          raise[tq] = EMPTY_TEXT
        else
          entry = head[2] .. ' ' .. head[1] .. ' 0:0:0:0'
          redis.call('HSET', heads, tq, entry)
        end
      end
      if entry then
        local text, member, c, m, t, e, fl = string.match(entry,
          '^(%S+) ([^:]+:([^:]+):([^:]+):([^:]+):(%S+)) (%S+)$')
        local score = tonumber(text)
        if score > sidx then raise[tq] = text end
        c, m, t, e = tonumber(c), tonumber(m), tonumber(t), tonumber(e)
        if c <= cpu and m <= mem and t <= tmp and (left < 0 or e <= left)
            and (not btq or score < bscore or (score == bscore and tq < btq)) then
          btq, bscore, bmember, bc, bm, bt, bfloor = tq, score, member, c, m, t, fl
        end
        if not btq then
          local g1, g2, g3, g4 = string.match(fl, '^([^:]+):([^:]+):([^:]+):([^:]+)$')
          g1, g2, g3, g4 = tonumber(g1), tonumber(g2), tonumber(g3), tonumber(g4)
          if g1 < f1 then f1 = g1 end
          if g2 < f2 then f2 = g2 end
          if g3 < f3 then f3 = g3 end
          if g4 < f4 then f4 = g4 end
        end
      end
    end
    if stop or n < size then break end
    start = start + size
    size = size * 4
  end
  if not btq then
    local text = string.format('%.17g:%.17g:%.17g:%.17g', f1, f2, f3, f4)
    if text ~= floor_text then redis.call('HSET', qfloor, queue, text) floor_text = text end
    floor = {f1, f2, f3, f4}
    return nil
  end
  return btq, bscore, bmember, bc, bm, bt, bfloor
end

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
      local lease = ',"pl":' .. cjson.encode(pilot) .. ',"tm":' .. cjson.encode(now) .. '}'
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

local out = {'ok'}
while (#out - 1) / 2 < want do
  local tq, score, member, c, m, t, fl = pick()
  if not tq then
    if tq == false then
      if #out > 1 then out[1] = 'more' break end
      return {'needkeys', score}
    end
    break
  end
  local key = base .. 't:' .. tq
  if not declared(key) then
    if #out > 1 then out[1] = 'more' break end
    return {'needkeys', key}
  end
  redis.call('ZREM', key, member)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('HDEL', heads, tq)
    redis.call('ZADD', KEYS[4], 'NX', now, tq)
    raise[tq] = EMPTY_TEXT
  else
    redis.call('HSET', heads, tq, head[2] .. ' ' .. head[1] .. ' ' .. fl)
    raise[tq] = head[2]
  end
  for rtq, rscore in pairs(raise) do redis.call('ZADD', qh, rscore, rtq) end
  raise = {}
  local id = string.match(member, '^([^:]+):')
  local json = leased(redis.call('HGET', KEYS[1], id))
  redis.call('HSET', KEYS[1], id, json)
  redis.call('ZADD', KEYS[3], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = json
  cpu, mem, tmp = cpu - c, mem - m, tmp - t
end
for rtq, rscore in pairs(raise) do redis.call('ZADD', qh, rscore, rtq) end
return out
