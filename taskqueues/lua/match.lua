-- match: lease to one pilot the most urgent task-queue head that fits what it has free; optionally repeat
-- until nothing more fits (fill a multi-core pilot in one call).
-- KEYS[1]  jobs hash
-- KEYS[2]  qheads zset of the pilot's queue (task-queue id -> score, never above the real head score)
-- KEYS[3]  leases zset (job id -> expiry)
-- KEYS[4]  tqempty zset
-- KEYS[5..] the task-queue zsets the caller believes its queue can see, SORTED; an index entry whose key
--           is not declared is returned as {'needkeys', key} before anything is written
-- The hot path: this script does not use the shared prelude (no closures to build per call), and looks
-- declared keys up by binary search in the sorted KEYS instead of building a table of them.
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  pilot id
-- ARGV[3]  now (unix seconds)
-- ARGV[4]  lease length (seconds)
-- ARGV[5]  free cores      ARGV[6] free memory (MB)      ARGV[7] free scratch (MB)
-- ARGV[8]  seconds left (negative = unbounded)
-- ARGV[9]  how many jobs at most
-- Returns  {'ok', id1, record1, id2, record2, ...} (records as stored after the lease: without their
--          id, with the member's tail as mt; see _lib.lua's load/save) or {'needkeys', key}
local base, pilot, now, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local cpu, mem, tmp, left = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local want = tonumber(ARGV[9])
local qh = KEYS[2]
local EMPTY = 1e18

local function declared(key)
  local lo, hi = 5, #KEYS
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local k = KEYS[mid]
    if k == key then return true end
    if k < key then lo = mid + 1 else hi = mid - 1 end
  end
  return false
end

local function fits(member)
  local _, c, m, t, e = string.match(member, '^([^:]+):([^:]+):([^:]+):([^:]+):([^:]+)$')
  c, m, t, e = tonumber(c), tonumber(m), tonumber(t), tonumber(e)
  return c <= cpu and m <= mem and t <= tmp and (left < 0 or e <= left), c, m, t
end

-- Walk the index in score order. An entry whose score is below its task queue's real head was left stale
-- by a match through another queue: raise it and walk again (scores only rise that way, so the first
-- accurate entry reached is the true minimum). Heads that do not fit are skipped for this call.
local skipped = {}
local function pick()
  while true do
    local restart, start, size = false, 0, 4
    while not restart do
      local page = redis.call('ZRANGE', qh, start, start + size - 1, 'WITHSCORES')
      if #page == 0 then return nil end
      for i = 1, #page, 2 do
        local tq, sidx = page[i], tonumber(page[i + 1])
        if sidx >= EMPTY then return nil end
        if not skipped[tq] then
          local key = base .. 't:' .. tq
          if not declared(key) then return {needkeys = key} end
          local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
          if #head == 0 then
            redis.call('ZADD', qh, EMPTY, tq)
            restart = true
            break
          end
          local hscore = tonumber(head[2])
          if hscore > sidx then
            redis.call('ZADD', qh, head[2], tq)
            restart = true
            break
          end
          local ok, c, m, t = fits(head[1])
          if ok then return {tq = tq, key = key, member = head[1], c = c, m = m, t = t} end
          skipped[tq] = true
        end
      end
      start = start + size
      size = size * 4
    end
  end
end

local out = {'ok'}
while (#out - 1) / 2 < want do
  local p = pick()
  if p == nil then break end
  if p.needkeys then
    if #out > 1 then break end
    return {'needkeys', p.needkeys}
  end
  redis.call('ZREM', p.key, p.member)
  local head = redis.call('ZRANGE', p.key, 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('ZADD', qh, EMPTY, p.tq)
    redis.call('ZADD', KEYS[4], 'NX', now, p.tq)
  else
    redis.call('ZADD', qh, head[2], p.tq)
  end
  local id = string.match(p.member, '^([^:]+):')
  local rec = cjson.decode(redis.call('HGET', KEYS[1], id))
  rec.s = 'matched'
  rec.a = rec.a + 1
  rec.pl = pilot
  rec.tm = now
  local json = cjson.encode(rec)
  redis.call('HSET', KEYS[1], id, json)
  redis.call('ZADD', KEYS[3], now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = json
  cpu, mem, tmp = cpu - p.c, mem - p.m, tmp - p.t
end
return out
