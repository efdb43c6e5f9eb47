-- clean: forget task queues that have stayed empty longer than the grace period, with their SubmitPools
-- and their entries in every heads index (RFC #7: not as soon as they empty, by a periodic agent).
-- KEYS[1]  tqdefs hash
-- KEYS[2]  tqempty zset
-- KEYS[3]  poolstamp zset
-- KEYS[4..] task queues, pools and heads indexes of the candidates, the heads, qfloor and tqmax hashes
-- ARGV[1]  key base   ARGV[2] cutoff (empty since before this time)   ARGV[3] batch size
-- Returns  {'ok', removed task-queue id...} or {'needkeys', key...}
SCRIPT = 'clean'
local base = check_base({'tqdefs', 'tqempty', 'poolstamp'})
check_count(3, true)
local cutoff = argv_number(2, 'cutoff', -MAX_TIME, MAX_TIME)
local batch = argv_number(3, 'batch size', 1, MAX_BATCH, true)
if PROBLEM then return refused() end
declare_keys()
local cands = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%.17g', cutoff), 'LIMIT', 0, batch)
local pools = {}
for _, tq in ipairs(cands) do pools[tq] = pool_of(base, tq) end
need_heads(base)
local missing = needkeys()
if missing then return missing end
local out = {'ok'}
for _, tq in ipairs(cands) do
  redis.call('ZREM', KEYS[2], tq)
  if redis.call('ZCARD', base .. K_TQ .. tq) == 0 then
    for _, q in ipairs(pools[tq]) do index_head(base, q, tq) end
    redis.call('DEL', base .. K_POOL .. tq)
    redis.call('HDEL', KEYS[1], tq)
    redis.call('HDEL', base .. K_HEADS, tq)
    redis.call('HDEL', base .. K_TQMAX, tq)
    redis.call('ZREM', KEYS[3], tq)
    out[#out + 1] = tq
  end
end
return out
