-- refresh_pool: replace the SubmitPool (eligible catalog queues) of one task queue, keeping every
-- queue's heads index in step: entries added for new queues, removed for queues no longer eligible.
-- KEYS[1]  poolstamp zset
-- KEYS[2..] the task queue, its pool, the heads indexes of its old and new queues, the heads and qfloor
--           hashes (a queue that gains the task queue must have its floor lowered to the task queue's),
--           the tqdefs hash (only a task queue with a definition has a SubmitPool)
-- ARGV[1]  key base   ARGV[2] task-queue id   ARGV[3] now   ARGV[4..] the new queue ids
-- Returns  {'ok', added, removed}, {'gone', 0, 0} when the task queue has no definition (clean forgot
--          it since the caller read the definitions: the two periodic tasks run side by side), or
--          {'needkeys', key...}
-- The pool's stamp says when it was last computed, whether or not it changed.
SCRIPT = 'refresh_pool'
local base = check_base({'poolstamp'})
check_count(3)
local tq = argv_text(2, 'task-queue id', PATTERN.tq, 256)
local now = argv_number(3, 'now', 0, MAX_TIME)
for i = 4, #ARGV do argv_text(i, 'queue id', PATTERN.queue, 400) end
if PROBLEM then return refused() end
declare_keys()
need(base .. K_TQDEFS)
local missing = needkeys()
if missing then return missing end
if redis.call('HEXISTS', base .. K_TQDEFS, tq) == 0 then return {'gone', 0, 0} end
local old = pool_of(base, tq)
local new = {}
for i = 4, #ARGV do new[ARGV[i]] = true need(base .. K_QH .. ARGV[i]) end
need_heads(base)
local missing = needkeys()
if missing then return missing end
local key, poolkey = base .. K_TQ .. tq, base .. K_POOL .. tq
local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local score = head[2] or EMPTY
local oldset, added, removed = {}, 0, 0
for _, q in ipairs(old) do
  oldset[q] = true
  if not new[q] then
    index_head(base, q, tq)
    redis.call('SREM', poolkey, q)
    removed = removed + 1
  end
end
local entry = redis.call('HGET', base .. K_HEADS, tq)
local floor = entry and parse_floor(string.match(entry, ' (%S+)$')) or (#head > 0 and {0, 0, 0, 0}) or nil
for q, _ in pairs(new) do
  if not oldset[q] then
    index_head(base, q, tq, score)
    redis.call('SADD', poolkey, q)
    if floor then lower_qfloor(base, q, floor) end
    added = added + 1
  end
end
redis.call('ZADD', KEYS[1], now, tq)
return {'ok', added, removed}
