-- _lib: helpers put in front of every script that uses them (not a script of its own; match.lua does not use it).
-- They are made once, when the function library loads (taskqueues/store/scripts.py puts this file above the
-- script's line "-- per call:", taskqueues/store/functions.py's wrapped): some sixty closures and a dozen tables
-- made on every call cost a start a fifth of its instructions (scripts/count_life.py). So this file keeps one
-- call's state in upvalues that begin() sets afresh at the start of every call (the loader puts the call in
-- front of the script): KEYS and ARGV, the script's name and first problem, the keys declared and missing, the
-- records loaded, the task queues touched, the wakes, the events' author and time. Every upvalue a call writes
-- is listed there; the tables that are not (PATTERN, STATES, RESULT...) are constants no call changes.
-- Every key a script touches is declared in KEYS (match.lua's task queues aside: see its header). Keys
-- that depend on data (a task queue, its SubmitPool, the heads index of each eligible queue) are declared
-- by the caller; when a script finds one it was not given, it returns {'needkeys', key...} before writing
-- anything and the caller retries with them.
--
-- Argument checks. Anyone holding the store's credentials can call a script with any arguments, so each
-- script checks its KEYS and ARGV first, before it reads what they name and before its first write: a
-- refused call changes nothing and answers one error, "<script>: <argument>: <what is wrong>". The
-- check_* helpers record the first problem and return a harmless stand-in, so a script lists its checks
-- one a line and then returns refused() when it says so. Numbers read from text go through tonumber,
-- which takes "nan", "inf" and "0x10": every range test is written so that NaN fails it.
local KEYS, ARGV, SCRIPT, PROBLEM -- set by begin() at the start of every call
local MAX_TIME = 1e12    -- unix seconds, and any duration in seconds
local MAX_AMOUNT = 1e15  -- cores, MB, run times, counts: integers a double holds exactly
local MAX_SCORE = 1e17   -- a score stays below EMPTY (1e18), which marks an empty task queue in heads indexes
local MAX_BATCH = 100000
local NONE = {} -- an empty list to walk (never written)
-- A task-queue member's tail ":cpu:mem:tmp:ete": bounds that keep a job's work (cpu x ete, kept with INCRBY)
-- an exact integer, and the sum of many far inside 64 bits.
local TAIL_MAX = {1e6, 1e12, 1e12, 1e9}
local MAX_ETE = 1e9
local PATTERN = {
  tq = '^[%w_.%-]+$',                   -- task-queue id (the product's are 16 hex digits)
  queue = '^[%w][%w._+%-]*/[%w][%w._+%-]*/[%w][%w._+%-]*$',  -- catalog queue "site/ce/queue"
  job = '^[^:%s%c]+$',                  -- job id (no colon: it starts a task-queue member)
  name = '^[^%c]+$',                    -- pilot, rule, request name: any text without control characters
  request = '^[%w_.%-]+$',              -- request id
  tail = '^:%d+:%d+:%d+:%d+$',          -- task-queue member tail ":cpu:mem:tmp:ete"
  score = '^[-+]?%d*%.?%d*[eE]?[-+]?%d*$', -- a score as text: what ZADD parses, and nothing else
}
local function shown(v)
  if type(v) == 'string' then
    return cjson.encode(#v > 60 and (string.sub(v, 1, 60) .. '...') or v)
  end
  if v == nil then return 'nothing' end
  if v == cjson.null then return 'null' end
  return type(v) == 'table' and 'a JSON ' .. (next(v) == 1 and 'array' or 'object') or tostring(v)
end
local function problem(where, what)
  if not PROBLEM then PROBLEM = SCRIPT .. ': ' .. where .. ': ' .. what end
end
local function refused()
  if PROBLEM then return redis.error_reply(PROBLEM) end
  return nil
end
-- A finite number in [lo, hi] (an integer if `int`); `v` is a JSON number, or text when `text`.
local function check_number(where, v, lo, hi, int, text)
  local n = v
  if text and type(v) == 'string' then n = tonumber(v) end
  if type(n) ~= 'number' or not (n >= lo and n <= hi) or (int and n ~= math.floor(n)) then
    problem(where, 'wants ' .. (int and 'an integer' or 'a number') .. ' in [' .. string.format('%.17g', lo) ..
      ', ' .. string.format('%.17g', hi) .. '], got ' .. shown(v))
    return lo
  end
  return n
end
-- Whether v is a string of at most `max` bytes that matches `pattern` (any string when nil): check_text's test,
-- for callers that name what they check only when it fails.
local function text_ok(v, pattern, max)
  return type(v) == 'string' and (not max or #v <= max) and (not pattern or string.match(v, pattern) ~= nil)
end
-- A string of at most `max` bytes that matches `pattern` (any string when nil).
local function check_text(where, v, pattern, max)
  if not text_ok(v, pattern, max) then
    problem(where, 'wants ' .. (pattern and 'text matching ' .. pattern or 'text') ..
      (max and ' of at most ' .. max .. ' bytes' or '') .. ', got ' .. shown(v))
    return ''
  end
  return v
end
-- ARGV[i] checked as check_number or check_text would, the text naming it ("ARGV[i] (what)") made only when it
-- is wrong: made on every call, it cost a start a fifth of its instructions (a number's digits are an sprintf).
-- An argument is a string, or nil past the last; `n % 1 == 0` is math.floor's test for a finite n.
local function argv_number(i, what, lo, hi, int)
  local n = tonumber(ARGV[i])
  if n and n >= lo and n <= hi and (not int or n % 1 == 0) then return n end
  return check_number('ARGV[' .. i .. '] (' .. what .. ')', ARGV[i], lo, hi, int, true)
end
local function argv_text(i, what, pattern, max)
  local v = ARGV[i]
  if text_ok(v, pattern, max) then return v end
  return check_text('ARGV[' .. i .. '] (' .. what .. ')', v, pattern, max)
end
-- A table decoded from JSON: an object (string keys only) or an array (1..n, no holes). An empty one is both.
-- cjson makes an object's keys strings and an array's 1..n (a null is cjson.null, not nil), so a decoded table
-- with a first element is an array and one without is an object: no walk over its fields.
local function is_object(t)
  return type(t) == 'table' and t[1] == nil
end
local function is_array(t)
  return type(t) == 'table' and (t[1] ~= nil or next(t) == nil)
end
-- The object a stored JSON text holds (a record read from Redis), or nil when there is none or it is not one.
local function json_object(raw)
  local ok, v = pcall(cjson.decode, raw or '')
  if ok and is_object(v) then return v end
  return nil
end
-- A JSON object given as text (an argument, or a record field that holds JSON text).
local function check_json(where, text)
  if type(text) ~= 'string' or string.sub(text, 1, 1) ~= '{' then
    problem(where, 'wants a JSON object as text, got ' .. shown(text))
    return {}
  end
  local ok, v = pcall(cjson.decode, text)
  if not ok or not is_object(v) then
    problem(where, 'is not a JSON object: ' .. shown(text))
    return {}
  end
  return v
end
-- One value of a JSON payload, by kind (a string naming it: no closures to build on every call).
local STATES = {blocked = true, releasing = true, waiting = true, matched = true, running = true, done = true,
                failed = true, cancelled = true, ['dep-failed'] = true, held = true}
local function check_kind(where, v, kind)
  if kind == 'text' then check_text(where, v)
  elseif kind == 'time' then check_number(where, v, 0, MAX_TIME)
  elseif kind == 'amount' then check_number(where, v, 0, MAX_AMOUNT)
  elseif kind == 'count' then check_number(where, v, 0, MAX_AMOUNT, true)
  elseif kind == 'signed' then check_number(where, v, -MAX_AMOUNT, MAX_AMOUNT)
  elseif kind == 'exit' then check_number(where, v, -1e9, 1e9, true)
  elseif kind == 'ete' then check_number(where, v, 0, MAX_ETE)
  elseif kind == 'tail' then
    local c, m, t, e = string.match(type(v) == 'string' and v or '', '^:(%d+):(%d+):(%d+):(%d+)$')
    local f = {tonumber(c), tonumber(m), tonumber(t), tonumber(e)}
    for i = 1, 4 do
      if not (f[i] and f[i] <= TAIL_MAX[i]) then
        problem(where, 'wants ":cpu:mem:tmp:ete", whole numbers up to ' .. string.format('%g:%g:%g:%g',
          unpack(TAIL_MAX)) .. ', got ' .. shown(v))
        break
      end
    end
  elseif kind == 'score' then
    local n = type(v) == 'string' and string.match(v, PATTERN.score) and tonumber(v)
    if not (n and n >= -MAX_SCORE and n <= MAX_SCORE) then
      problem(where, 'wants a score as text in [-1e17, 1e17], got ' .. shown(v))
    end
  elseif kind == 'json' then check_json(where, v)
  elseif kind == 'one' then if v ~= 1 then problem(where, 'wants 1, got ' .. shown(v)) end
  elseif kind == 'bool' then if type(v) ~= 'boolean' then problem(where, 'wants true or false, got ' .. shown(v)) end
  elseif kind == 'array' then if not is_array(v) then problem(where, 'wants an array, got ' .. shown(v)) end
  elseif kind == 'maybe-amount' then if v ~= cjson.null then check_number(where, v, -MAX_AMOUNT, MAX_AMOUNT) end
  elseif kind == 'scalar' then
    if type(v) == 'table' then problem(where, 'wants text, a number, true, false or null, got ' .. shown(v)) end
  elseif kind == 'any' then return
  else check_text(where, v, PATTERN[kind], kind == 'queue' and 400 or 256)
  end
end
-- An object whose every field is one `schema` names (field -> kind), of its kind; `required` lists fields
-- it must carry. An injected field (a state, a lease, a pilot) is refused by name.
-- A field passes check_kind for sure when it passes this test (a number kind's range, a text kind's pattern and
-- bound), which builds no text: check_kind, which names the field, runs only on the others.
local NUMBER_KIND = {time = {0, MAX_TIME}, amount = {0, MAX_AMOUNT}, count = {0, MAX_AMOUNT, true},
                     signed = {-MAX_AMOUNT, MAX_AMOUNT}, exit = {-1e9, 1e9, true}, ete = {0, MAX_ETE}}
local TEXT_KIND = {tq = 256, queue = 400, job = 256, name = 256, request = 256}
-- A tail passes when each of its numbers has fewer digits than its bound in TAIL_MAX (check_kind reads the others):
-- the digits' positions, which make no string.
local TAIL_AT = '^:()%d+():()%d+():()%d+():()%d+()$'
local TAIL_DIGITS = {6, 12, 12, 9}
local function short_tail(v)
  local a1, b1, a2, b2, a3, b3, a4, b4 = string.match(v, TAIL_AT)
  return a1 ~= nil and b1 - a1 <= TAIL_DIGITS[1] and b2 - a2 <= TAIL_DIGITS[2] and b3 - a3 <= TAIL_DIGITS[3]
    and b4 - a4 <= TAIL_DIGITS[4]
end
local function passes(v, kind)
  local range = NUMBER_KIND[kind]
  if range then
    return type(v) == 'number' and v >= range[1] and v <= range[2] and (not range[3] or v % 1 == 0)
  end
  if kind == 'text' or kind == 'any' then return kind == 'any' or type(v) == 'string' end
  if type(v) ~= 'string' then return false end
  if kind == 'tail' then return short_tail(v) end
  if kind == 'score' then
    local n = string.match(v, PATTERN.score) and tonumber(v)
    return n and n >= -MAX_SCORE and n <= MAX_SCORE or false
  end
  local max = TEXT_KIND[kind]
  return max ~= nil and #v <= max and string.match(v, PATTERN[kind]) ~= nil
end
local function check_fields(where, obj, schema, required)
  if not is_object(obj) then
    problem(where, 'wants a JSON object, got ' .. shown(obj))
    return false
  end
  if required then
    for _, k in ipairs(required) do
      if obj[k] == nil then problem(where, 'lacks the field ' .. k) end
    end
  end
  for k, v in pairs(obj) do
    local kind = schema[k]
    if not kind then
      problem(where, 'may not carry the field ' .. shown(k))
    elseif not passes(v, kind) then
      check_kind(where .. '.' .. k, v, kind)
    end
  end
  return PROBLEM == nil
end
-- Whether check_fields(where, obj, schema, required) would find nothing wrong: the same tests, recording nothing
-- and naming nothing (a batch calls it on every job, and check_fields, which names the job, on one that fails).
local function fields_pass(obj, schema, required)
  if not is_object(obj) then return false end
  for _, k in ipairs(required) do
    if obj[k] == nil then return false end
  end
  for k, v in pairs(obj) do
    local kind = schema[k]
    if kind ~= 'any' and (not kind or not passes(v, kind)) then return false end
  end
  return true
end
-- The key base of a call ("<prefix>:{<vo>}:", ARGV[1] of most scripts), and its fixed KEYS by role (the key
-- name after the base); any further key (declared by the caller) must belong to the same community.
local BASE = '^[^{}:%s]+:{[^{}:%s]+}:$'
-- The fixed keys are kept from call to call, by key base (ROLE_KEYS: base -> base .. role for each role): they are
-- made of the text of ARGV[1] and the roles alone, so they are the same whenever both are (kept with the roles
-- they were made for, compared role by role); at most 64 bases, then all are made again. A further key found
-- to start with a base is kept too (OF_BASE: key -> base; at most 1024 keys, then forgotten): a C call per key
-- to compare its start was a tenth of a completion's checks.
local ROLE_KEYS, ROLE_BASES, OF_BASE, OF_BASE_N = {}, 0, {}, 0
local function check_keys(base, roles)
  local want, n = ROLE_KEYS[base], #roles
  if want and want.n == n then
    local kept = want.roles
    for i = 1, n do
      if kept[i] ~= roles[i] then want = nil break end
    end
  else
    want = nil
  end
  if not want then
    if ROLE_BASES >= 64 then ROLE_KEYS, ROLE_BASES = {}, 0 end
    want = {n = n, roles = roles}
    for i, role in ipairs(roles) do want[i] = base .. role end
    ROLE_KEYS[base], ROLE_BASES = want, ROLE_BASES + 1
  end
  for i = 1, want.n do
    if KEYS[i] ~= want[i] then
      problem('KEYS[' .. i .. ']', 'wants ' .. shown(want[i]) .. ', got ' .. shown(KEYS[i]))
    end
  end
  for i = #roles + 1, #KEYS do
    local k = KEYS[i]
    if OF_BASE[k] ~= base then
      if string.find(k, base, 1, true) ~= 1 then
        problem('KEYS[' .. i .. ']', shown(k) .. ' is not a key of ' .. base)
      else
        if OF_BASE_N >= 1024 then OF_BASE, OF_BASE_N = {}, 0 end
        OF_BASE[k], OF_BASE_N = base, OF_BASE_N + 1
      end
    end
  end
end
local function check_base(roles)
  local base = ARGV[1]
  if type(base) ~= 'string' or not string.match(base, BASE) then
    problem('ARGV[1] (key base)', 'wants "<prefix>:{<vo>}:", got ' .. shown(base))
    return '?:{?}:'
  end
  check_keys(base, roles)
  return base
end
-- The base of a script that takes none in ARGV: KEYS[1] must be a jobs hash.
local function base_of_jobs(roles)
  local base = type(KEYS[1]) == 'string' and string.match(KEYS[1], '^([^{}:%s]+:{[^{}:%s]+}:)jobs$')
  if not base then
    problem('KEYS[1]', 'wants the jobs hash "<prefix>:{<vo>}:jobs", got ' .. shown(KEYS[1]))
    return '?:{?}:'
  end
  check_keys(base, roles)
  return base
end
-- ARGV[i], ARGV[i + 1]: who asks for a change and why ('' for no reason), as its events say.
local function argv_actor(i)
  return argv_text(i, 'who', PATTERN.name, 256), argv_text(i + 1, 'reason', nil, 4096)
end
-- ARGV[first..]: job ids, at most MAX_BATCH of them.
local function argv_job_ids(first)
  if #ARGV - first + 1 > MAX_BATCH then problem('ARGV', 'holds more than ' .. MAX_BATCH .. ' job ids') end
  for i = first, #ARGV do argv_text(i, 'job id', PATTERN.job, 64) end
end
local function check_count(n_args, exact)
  if #ARGV < n_args or (exact and #ARGV > n_args) then
    problem('ARGV', 'wants ' .. (exact and '' or 'at least ') .. n_args .. ' arguments, got ' .. #ARGV)
  end
end
-- The result a pilot reports (complete.lua, fail.lua): these fields only, copied onto the record.
local RESULT = {x = 'exit', w = 'amount', cpu = 'amount', pm = 'amount', o = 'json', why = 'text', st = 'time'}

local EMPTY = 1e18
-- Every heads index holds this member, scored +inf (after every task queue, even an empty one), from the
-- moment it is created. Longer than the 64 bytes up to which Redis keeps a small sorted set as a listpack
-- (which parses every score from text on each ZADD and ZRANGE), it makes Redis keep the index as a
-- skiplist: a ZADD into a 100-entry index went from 10 us to 2 us. Readers stop before EMPTY, so before it.
-- The heads hash holds it as a field too (sync_heads), for the same reason: as a listpack, every HMGET of
-- match scans the whole hash (at 100 task queues, 17% of a filling match's instructions went there).
-- Nothing lists the heads hash; match only reads it by task-queue id.
local SKIPLIST = '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~' -- 65 '~' (string.rep is not reachable while the library loads)
-- The catalog queues this call enqueued work for: queue -> jobs enqueued there (wake() reads it), and
-- where wake() starts its round of the queue's wake shards (the first enqueued job's id: calls rotate).
local WAKE = {}
local WAKE_FROM = nil
local DECLARED = nil
local MISSING = {}
-- Every key of KEYS is declared (the fixed ones too: need() may ask for one a script has in a fixed place).
-- DECLARED: nil before declare_keys(), true after it, then the set of KEYS once a long KEYS is asked about (a
-- short one is read through: a set of its twenty keys made on every call cost a completion 18k instructions).
local function declare_keys()
  DECLARED = true
end
local function declared(k)
  if DECLARED == true then
    if #KEYS <= 32 then
      for j = 1, #KEYS do if KEYS[j] == k then return true end end
      return false
    end
    DECLARED = {}
    for j = 1, #KEYS do DECLARED[KEYS[j]] = true end
  end
  return DECLARED ~= nil and DECLARED[k] == true
end
local function need(k)
  if not declared(k) then MISSING[#MISSING + 1] = k end
  return k
end
local function needkeys()
  if #MISSING == 0 then return nil end
  table.insert(MISSING, 1, 'needkeys')
  return MISSING
end
-- The queues of a task queue's SubmitPool; declares the task queue, its pool and their heads indexes.
local function pool_of(base, tq)
  need(base .. K_TQ .. tq)
  local poolkey = base .. K_POOL .. tq
  if not declared(poolkey) then need(poolkey) return {} end
  local queues = redis.call('SMEMBERS', poolkey)
  for _, q in ipairs(queues) do need(base .. K_QH .. q) end
  return queues
end
-- Outstanding work (core-seconds of every unfinished job with a known shape), what a load-aware ETA
-- divides by the cores (matcher.eta). A job counts from the moment it has a task-queue member.
-- Whole seconds with INCRBY: INCRBYFLOAT rewrites its arguments for replication, which in Redis 6.2
-- corrupts the scripting client's argument cache (the server crashed on the next SADD).
local function work_of(rec)
  if not rec.m then return 0 end
  local cpu = tonumber(string.match(rec.m, '^[^:]+:([^:]+):')) or 1
  return cpu * math.ceil(tonumber(rec.e) or 0)
end
-- The amount goes as an integer's digits (a Lua number would be sent as "1e+14" past 14 digits); a counter
-- that would overflow is held at its bound rather than failing the script after its first writes.
local function add_work(base, amount)
  if amount == 0 then return end
  local key = base .. K_WORK
  local reply = redis.pcall('INCRBY', key, string.format('%d', amount))
  if type(reply) == 'table' and reply.err then
    redis.call('SET', key, amount > 0 and '9000000000000000000' or '0')
  end
end
-- Heads (match.lua reads them instead of every task-queue zset). The `heads` hash maps each non-empty
-- task queue to "<score> <member> <floor>": its head exactly (score as ZRANGE prints it) and a floor
-- "cpu:mem:tmp:need" at or below every member it has held since it was last empty. The `qfloor` hash maps
-- a catalog queue to a floor of every member of the task queues its heads index lists, so a pilot that
-- nothing there can fit is answered without a walk; a queue without an entry has no floor yet.
-- Every script that adds or removes task-queue members calls touched() for each change, then sync_heads()
-- once after its writes, which also marks in `tqempty` every task queue the script emptied (clean.lua
-- forgets it after a grace period) and keeps `tqmax`, the largest exact cpu, mem, tmp and wall of the
-- jobs that entered each task queue since it was last empty: what the SubmitPool refresh judges
-- eligibility on (matcher.periodic), never the buckets. The caller declares the four hashes; need_heads()
-- checks.
local TOUCHED = {}
local function need_heads(base)
  need(base .. K_HEADS)
  need(base .. K_QFLOOR)
  need(base .. K_TQEMPTY)
  need(base .. K_TQMAX)
end
-- "a:b:c:d" as four numbers; a text that is not (corrupted by hand) reads as 0:0:0:0, the floor that is
-- never wrong.
local function parse_floor(text)
  local c, m, t, e = string.match(text or '', '^([^:]+):([^:]+):([^:]+):([^:]+)$')
  c, m, t, e = tonumber(c), tonumber(m), tonumber(t), tonumber(e)
  if not (c and m and t and e) then return {0, 0, 0, 0} end
  return {c, m, t, e}
end
local function lower_floor(f, g)
  if not f then return {g[1], g[2], g[3], g[4]} end
  for i = 1, 4 do if g[i] < f[i] then f[i] = g[i] end end
  return f
end
local function floor_text(f)
  return string.format('%.17g:%.17g:%.17g:%.17g', f[1], f[2], f[3], f[4])
end
-- A member entered (`member`) or left (nil) task queue tq, whose SubmitPool is `queues` (nil if unknown).
local function touched(tq, member, queues)
  local entry = TOUCHED[tq]
  if not entry then entry = {added = 0} TOUCHED[tq] = entry end
  if queues then entry.queues = queues end
  if member then
    entry.added = entry.added + 1
    entry.floor = lower_floor(entry.floor, parse_floor(string.match(member, '^[^:]*:(.*)$')))
  end
end
-- Lower the floor of catalog queue q to take `f` in, when q has one.
local function lower_qfloor(base, q, f)
  local key = base .. K_QFLOOR
  local old = redis.call('HGET', key, q)
  if not old then return end
  local text = floor_text(lower_floor(parse_floor(old), f))
  if text ~= old then redis.call('HSET', key, q, text) end
end
-- The largest exact values of the jobs that entered task queue tq in this call, merged into `tqmax`
-- (replacing what it held when the task queue was empty before).
local function raise_largest(base, tq, entry)
  local key = base .. K_TQMAX
  local old = not entry.fresh and redis.call('HGET', key, tq)
  local f = entry.largest
  if old then
    local g = parse_floor(old)
    for i = 1, 4 do if g[i] > f[i] then f[i] = g[i] end end
  end
  local text = floor_text(f)
  if text ~= old then redis.call('HSET', key, tq, text) end
end
-- The heads index of a catalog queue by group (issue 31): with a shares policy, match.lua walks the task queues
-- group by group, in the policy's order, instead of the whole heads index. For each catalog queue q whose index
-- by group is built (listed in the set K_GHQ), the set K_GH .. q names its groups (and '~', so that it exists
-- once built), and the zset K_GH .. q .. ':' .. group holds exactly the entries of q's heads index whose task
-- queue is of that group, with the same scores. Every write to a heads index goes through index_head, which
-- keeps both; match.lua (which does not use this prelude) does the same in its own code, builds a queue's index
-- by group the first time a policy match reads it, and `pilotfish shares` without a policy drops them all
-- (taskqueues.store.gheads). Like match.lua's task queues, these keys are built from the key base, not
-- declared: they carry the community's hash tag. A community that keeps none pays one EXISTS per call.
local GH = nil -- nil until looked at in this call; false: no index by group; else catalog queue -> built or not
-- The group of a task queue "<hash>.<group>.<owner>[.<type>]" (match.lua's fs_acct); "default" without one.
local function group_of(tq)
  return string.match(tq, '^[^.]+%.([^.]+)%.[^.]') or 'default'
end
-- Set task queue tq's entry in catalog queue q's heads index to `score` (ZADD with `flag`, 'NX' or 'LT', when
-- given), or remove it (score nil), in the index by group too where it is built.
local function index_head(base, q, tq, score, flag)
  local qh = base .. K_QH .. q
  if not score then
    redis.call('ZREM', qh, tq)
  elseif flag then
    redis.call('ZADD', qh, flag, score, tq, 'inf', SKIPLIST)
  else
    redis.call('ZADD', qh, score, tq, 'inf', SKIPLIST)
  end
  if GH == nil then GH = redis.call('EXISTS', base .. K_GHQ) == 1 and {} or false end
  if not GH then return end
  local built = GH[q]
  if built == nil then
    built = redis.call('EXISTS', base .. K_GH .. q) == 1
    GH[q] = built
  end
  if not built then return end
  local group = group_of(tq)
  local key = base .. K_GH .. q .. ':' .. group
  if not score then
    redis.call('ZREM', key, tq)
  else
    if flag then redis.call('ZADD', key, flag, score, tq) else redis.call('ZADD', key, score, tq) end
    redis.call('SADD', base .. K_GH .. q, group)
  end
end
-- Put a waiting job into its task queue. The heads index only ever gets ZADD LT here, so every entry
-- stays at or below its task queue's real head score (what match relies on). A task queue with no
-- SubmitPool (cleaned meanwhile, or no queue eligible any more) sends the job to the releasing set,
-- where the caller recomputes its pool from the catalog (release.lua).
-- A job held before it could wait (blocked, releasing: `pilotfish hold`) becomes held instead (rec.ho).
local function enqueue(base, tqempty, releasing, rec, queues, now)
  if rec.ho then
    rec.s, rec.ho = 'held', nil
    return
  end
  if #queues == 0 then
    rec.s = 'releasing'
    redis.call('ZADD', releasing, now, rec.id)
    return
  end
  rec.s = 'waiting'
  for _, q in ipairs(queues) do WAKE[q] = (WAKE[q] or 0) + 1 end
  WAKE_FROM = WAKE_FROM or tonumber(rec.id) or #rec.id
  redis.call('ZADD', base .. K_TQ .. rec.t, rec.sc, rec.m)
  -- Unmarked once per call: nothing marks a task queue empty again before sync_heads, which forgets TOUCHED.
  local entry = TOUCHED[rec.t]
  local fresh = not (entry and entry.unmarked) and redis.call('ZREM', tqempty, rec.t) == 1
  touched(rec.t, rec.m, queues)
  entry = TOUCHED[rec.t]
  entry.unmarked = true
  -- Each heads index gets the lowest score the call enqueued, once, in sync_heads (ZADD LT keeps the lowest of
  -- them all the same; a ZADD per job was a sixth of a batch's instructions). Nothing reads a heads index
  -- between an enqueue and the sync_heads that follows it.
  local score = tonumber(rec.sc)
  if not score then
    for _, q in ipairs(queues) do index_head(base, q, rec.t, rec.sc, 'LT') end
  else
    local low = entry.low
    if not low then low = {} entry.low = low end
    for _, q in ipairs(queues) do
      local l = low[q]
      if not l or score < l[1] then low[q] = {score, rec.sc} end
    end
  end
  local c, m, t = string.match(rec.m, ':(%d+):(%d+):(%d+):%d+$')
  local wall = type(rec.r) == 'string' and string.match(rec.r, '[{,]"wall":(%d+)[,}]') or 0
  local f = {tonumber(c) or 0, tonumber(m) or 0, tonumber(t) or 0, tonumber(wall) or 0}
  if fresh then entry.fresh, entry.largest = true, nil end
  if entry.largest then
    for i = 1, 4 do if f[i] > entry.largest[i] then entry.largest[i] = f[i] end end
  else
    entry.largest = f
  end
end
local function sync_heads(base, now)
  local heads = base .. K_HEADS
  for tq, entry in pairs(TOUCHED) do
    for q, l in pairs(entry.low or NONE) do index_head(base, q, tq, l[2], 'LT') end
  end
  for tq, entry in pairs(TOUCHED) do
    local key = base .. K_TQ .. tq
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if entry.largest then raise_largest(base, tq, entry) end
    if #head == 0 then
      redis.call('HDEL', heads, tq)
      redis.call('ZADD', base .. K_TQEMPTY, 'NX', now, tq)
    else
      local floor = entry.floor
      local old = redis.call('HGET', heads, tq)
      if old then
        floor = lower_floor(floor, parse_floor(string.match(old, ' (%S+)$')))
      elseif redis.call('ZCARD', key) > entry.added then
        floor = {0, 0, 0, 0} -- members from before heads were kept: nothing known about them
      end
      redis.call('HSET', heads, tq, head[2] .. ' ' .. head[1] .. ' ' .. floor_text(floor), SKIPLIST, '')
      if entry.floor then
        for _, q in ipairs(entry.queues or {}) do lower_qfloor(base, q, entry.floor) end
      end
    end
  end
  TOUCHED = {}
end
-- Records are stored without their id (the hash field), with only the tail of their task-queue member
-- (":cpu:mem:tmp:need"), and without the attempt while it is 0 nor the retry limit while it is the
-- default (MAX_RETRIES, put in front by the loader from taskqueues.store.records.DEFAULT_MAX_RETRIES):
-- memory per waiting job is a target. load/save put them back and take them out, so scripts always see
-- rec.id, rec.m, rec.a and rec.mr.
-- A record that does not decode to an object with a known state (corrupted by hand, or by a bug of the
-- past) loads as nil, like a missing one, with 'unreadable' as a second value: no script fails on it.
local FINAL_STATES = {done = true, failed = true, cancelled = true, ['dep-failed'] = true}
local LOADED_STATE = {} -- job id -> the state load() read (save() keeps the indexes of states)
local LOADED_END = {} -- job id -> the end time load() read (save() moves its history entries)
local LOADED_WHY = {}   -- job id -> the reason load() read (an event carries the reason a change wrote)
-- ==== job events (issue 28) ====
-- Every change of a job's state is recorded where it is stored: save() appends lines to the job's field of the
-- `events` hash (keys.py), one JSON object each, {"t": time, "f": from, "s": to, "by": who, "why": reason,
-- "a": attempt, "p": pilot, "x": exit}, keeping the last EVENTS_CAP lines; the hash is declared by
-- Store.call_script, and a packed call (a pilot's completion) reaches it by the key base like match.lua its task
-- queues (same hash tag, same slot). What the record itself tells is not written while it tells it, to keep
-- the memory per waiting job, the match and the start as they were: the submission (`ts`), and a lease while
-- it lasts (match.lua and start.lua write no event: the match is the record's `tm` and `pl`, the start its
-- `st`). When the lease ends (done, failed, requeued, given back...), save() writes its match and start with
-- the change that ends it, in one append; the reader (taskqueues.store.lifecycle) shows the submission and a
-- lease under way from the record.
-- A script names who makes its changes with events_by(now, who) (default: the script's name, now from TIME).
local EVENTS_CAP = 100
local EVENT_BY, EVENT_NOW, EVENT_NOTE = nil, nil, nil
local LOADED_PILOT = {} -- job id -> the pilot its record named when load() read it
local LOADED_RAW = {}   -- job id -> its record's text as load() read it
local function events_by(now, who)
  EVENT_NOW, EVENT_BY = now, who
end
local function event_now()
  if not EVENT_NOW then
    local t = redis.call('TIME')
    EVENT_NOW = tonumber(t[1]) + tonumber(t[2]) / 1e6
  end
  return EVENT_NOW
end
-- Append `events` (a list) to job id's lines, dropping the oldest past EVENTS_CAP.
local function append_event(base, id, events)
  local key = base .. K_EVENTS
  local lines = {}
  for i, e in ipairs(events) do lines[i] = cjson.encode(e) end
  local line = table.concat(lines, '\n')
  local old = redis.call('HGET', key, id)
  if old then
    if #old > EVENTS_CAP * 40 then
      local n = select(2, string.gsub(old, '\n', '')) + #events
      for _ = EVENTS_CAP, n do old = string.sub(old, (string.find(old, '\n', 1, true) or #old) + 1) end
    end
    if old ~= '' then line = old .. '\n' .. line end
  end
  redis.call('HSET', key, id, line)
end
-- A lease's events: its match, its start if the payload started, then `e` (the change that ended it).
local function lease_events(rec, e)
  local pilot = e.p
  local tm, st = tonumber(rec.tm), tonumber(rec.st)
  local out = {{t = tm or e.t, f = 'waiting', s = 'matched', by = 'match', p = pilot, a = rec.a}}
  e.f = 'matched'
  if st and (not tm or st >= tm) then
    out[2] = {t = st, f = 'matched', s = 'running', by = 'pilot ' .. tostring(pilot), p = pilot, a = rec.a}
    e.f = 'running'
  end
  out[#out + 1] = e
  return out
end
-- The end of a lease as its pilot reported it, from a record that ended so (done, failed, cancelled, by its
-- pilot's report): what the record tells and save() did not write (see below).
local function ended_lease(rec)
  local e = {t = tonumber(rec.te) or 0, s = rec.s, by = 'pilot ' .. tostring(rec.pl), a = rec.a, p = rec.pl}
  if rec.x ~= nil and rec.x ~= cjson.null then e.x = rec.x end
  if rec.why then e.why = rec.why end
  return lease_events(rec, e)
end
-- Whether `text` (a job's event lines) ends with the end of attempt `a` in state `s`.
local function written_end(text, s, a)
  local last = string.match(text or '', '([^\n]*)$')
  local ok, e = pcall(cjson.decode, last or '')
  return ok and type(e) == 'table' and e.s == s and tostring(e.a) == tostring(a)
end
-- The events of a change of rec's state from `before` (what load() read) to rec.s: nothing while a lease
-- lasts; at its end, its match (and its start, if the payload started) first. A lease its own pilot ends for
-- good (done, failed, cancelled by its report) writes nothing either: the record tells all of it (tm, st, pl,
-- te, x, why), and most jobs end so; the change that takes the job out of that state (a resubmit) writes it
-- first, from the record as load() read it (LOADED_RAW), unless it was written.
local function state_event(base, rec, before)
  if rec.s == 'matched' or rec.s == 'running' then return end
  if FINAL_STATES[rec.s] and (before == 'matched' or before == 'running') and EVENT_BY
      and EVENT_BY == 'pilot ' .. tostring(LOADED_PILOT[rec.id] or rec.pl or rec.lx) then
    return -- (below, as a test made before any event is built: most jobs end so)
  end
  local e = {t = event_now(), f = before, s = rec.s, by = EVENT_BY or SCRIPT, a = rec.a}
  local why = EVENT_NOTE or (rec.why ~= LOADED_WHY[rec.id] and rec.why) or nil
  if why then e.why = why end
  if before == 'matched' or before == 'running' then
    local pilot = LOADED_PILOT[rec.id] or rec.pl or rec.lx
    if FINAL_STATES[rec.s] and e.by == 'pilot ' .. tostring(pilot) then return end
    e.p = pilot
    -- an exit code this change reports (a pilot's), not one an earlier attempt left on the record
    if rec.x ~= nil and rec.x ~= cjson.null and string.sub(e.by, 1, 6) == 'pilot ' then e.x = rec.x end
    append_event(base, rec.id, lease_events(rec, e))
    return
  end
  local out = {e}
  local old = FINAL_STATES[before] and LOADED_RAW[rec.id] and cjson.decode(LOADED_RAW[rec.id])
  if old and old.tm and old.pl and not written_end(redis.call('HGET', base .. K_EVENTS, rec.id), old.s, old.a or 0) then
    old.a = old.a or 0
    out = ended_lease(old)
    out[#out + 1] = e
  end
  append_event(base, rec.id, out)
end
-- ==== end of the job-event block ====
-- A job record from its stored text (false/nil: no record); nil, 'unreadable' when it cannot be read.
local function decode(raw, id)
  if not raw then return nil end
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or not is_object(rec) or not STATES[rec.s] or (rec.t ~= nil and type(rec.t) ~= 'string')
      or (rec.mt ~= nil and type(rec.mt) ~= 'string') then
    return nil, 'unreadable'
  end
  rec.id = id
  LOADED_STATE[id] = rec.s
  LOADED_WHY[id] = rec.why
  LOADED_PILOT[id] = rec.pl
  LOADED_RAW[id] = raw
  LOADED_END[id] = rec.te
  if rec.mt then rec.m, rec.mt = id .. rec.mt, nil end
  rec.a = rec.a or 0
  rec.mr = rec.mr or MAX_RETRIES
  return rec
end
local function load(jobs, id)
  return decode(redis.call('HGET', jobs, id), id)
end
-- ==== history index (issue 28): ended jobs by owner and by group ====
-- The `endedby` zset (all scores 0, read by ZRANGEBYLEX) holds two entries per ended job,
-- "o:<owner>:<end>:<id>:<state>:<group>" and "g:<group>:<end>:<id>:<state>:<owner>", <end> the end time as
-- "%014.3f" so that text order is time order (taskqueues/store/history.py reads them). The account comes
-- from the task queue ("<hash>.<group>.<owner>[.<type>]"), else from the request record, else "default".
local function history_entries(base, rec, state, ended)
  local g, o = string.match(tostring(rec.t or ''), '^[^.]+%.([^.]+)%.([^.]+)')
  if not g then
    g, o = 'default', 'default'
    local r = type(rec.q) == 'string' and json_object(redis.call('HGET', base .. K_REQUESTS, rec.q))
    if r then g, o = tostring(r.group or g), tostring(r.owner or o) end
  end
  -- The end as the record stores it (cjson keeps 14 significant digits), so that whoever reads the record
  -- later (forget.lua) names the same entry.
  local at = tonumber(string.format('%.14g', tonumber(ended) or 0))
  local tail = string.format(':%014.3f:%s:%s', at, rec.id, state)
  return 'o:' .. o .. tail .. ':' .. g, 'g:' .. g .. tail .. ':' .. o
end
-- A job's state changed from `before` (with the end time load() read) to rec.s: its entries follow.
local function index_history(base, rec, before)
  if FINAL_STATES[before] then
    redis.call('ZREM', base .. K_ENDEDBY, history_entries(base, rec, before, LOADED_END[rec.id]))
  end
  if FINAL_STATES[rec.s] then
    local by_owner, by_group = history_entries(base, rec, rec.s, rec.te)
    redis.call('ZADD', base .. K_ENDEDBY, 0, by_owner, 0, by_group)
  end
  LOADED_END[rec.id] = rec.te
end
-- ==== end of the history index ====
local function save(jobs, rec)
  local id, m, a, mr = rec.id, rec.m, rec.a, rec.mr
  rec.id = nil
  if m then rec.mt, rec.m = string.sub(m, #id + 1), nil end
  if a == 0 then rec.a = nil end
  if mr == MAX_RETRIES then rec.mr = nil end
  redis.call('HSET', jobs, id, cjson.encode(rec))
  rec.id, rec.m, rec.mt, rec.a, rec.mr = id, m, nil, a, mr
  -- The `blocked` and `ended` indexes (`pilotfish jobs` pages blocked jobs by submission and finished ones by
  -- end from them) are kept here, where every state is written, when the state changes from the one load()
  -- read (a new record: none); the caller declares both.
  -- So is the `held` index, and a job leaving a final state (resubmitted) leaves `ended`. A change of state
  -- from a record that existed is recorded as an event (state_event).
  local before = LOADED_STATE[id]
  if rec.s ~= before then
    local base = string.match(jobs, '^(.*)jobs$')
    if before == 'blocked' then redis.call('ZREM', base .. K_BLOCKED, id) end
    if rec.s == 'blocked' then redis.call('ZADD', base .. K_BLOCKED, tonumber(rec.ts) or 0, id) end
    if before == 'held' then redis.call('ZREM', base .. K_HELD, id) end
    if rec.s == 'held' then redis.call('ZADD', base .. K_HELD, event_now(), id) end
    if FINAL_STATES[rec.s] then
      redis.call('ZADD', base .. K_ENDED, tonumber(rec.te) or 0, id)
    elseif FINAL_STATES[before] then
      redis.call('ZREM', base .. K_ENDED, id)
    end
    index_history(base, rec, before)
    if before then state_event(base, rec, before) end
    LOADED_STATE[id] = rec.s
    LOADED_WHY[id], LOADED_PILOT[id], LOADED_RAW[id] = rec.why, rec.pl, nil
  end
end
-- Whether a record holds what enqueue() writes (a hand-made record may not).
local function enqueueable(rec)
  return type(rec.t) == 'string' and type(rec.m) == 'string' and type(rec.sc) == 'string'
    and string.match(rec.t, PATTERN.tq) and string.match(rec.m, '^[^:]+' .. string.sub(PATTERN.tail, 2))
    and string.match(rec.sc, PATTERN.score) and tonumber(rec.sc) ~= nil
end
-- A report from a pilot must name the job's current attempt and find the job in one of `states`.
local function check_report(rec, id, attempt, states)
  if not rec then return 'unknown job ' .. id end
  if rec.a ~= attempt and tostring(rec.a) ~= tostring(attempt) then
    return 'stale attempt ' .. attempt .. ' for job ' .. id .. ' (current ' .. tostring(rec.a) .. ', state ' .. rec.s .. ')'
  end
  for _, s in ipairs(states) do if rec.s == s then return nil end end
  return 'job ' .. id .. ' is ' .. rec.s
end
-- Counters of the stats hash (taskqueues/stats.py names its fields), one HINCRBY per event. The store
-- declares the hash for every script it calls (Store.call_script).
local function count(base, field, n)
  if n ~= 0 then redis.call('HINCRBY', base .. K_STATS, field, n) end
end
-- A job enters (1) or leaves (-1) the blocked state: the gauge in all and per task queue (whose field goes at 0).
local function count_blocked(base, rec, delta)
  count(base, 'blocked', delta)
  local field = 'blocked:' .. tostring(rec.t or '')
  if redis.call('HINCRBY', base .. K_STATS, field, delta) <= 0 then redis.call('HDEL', base .. K_STATS, field) end
end
-- End a job for good (failed, cancelled...) and mark every job that transitively depends on it
-- dep-failed with the reason. Only blocked or releasing dependents can exist below an unfinished job.
local function finish(jobs, releasing, rec, state, reason, now)
  local base = string.match(jobs, '^(.*)jobs$')
  add_work(base, -work_of(rec))
  if rec.s == 'blocked' then count_blocked(base, rec, -1) end
  count(base, 'ended:' .. state, 1)
  if rec.s == 'releasing' then redis.call('ZREM', releasing, rec.id) end -- else it is swept for ever
  rec.s = state
  rec.why = reason
  rec.te = now
  save(jobs, rec)
  local stack = {}
  for _, d in ipairs(rec.dn or NONE) do stack[#stack + 1] = {d, rec.id} end
  while #stack > 0 do
    local top = table.remove(stack)
    local drec = load(jobs, top[1])
    if drec and (drec.s == 'blocked' or drec.s == 'releasing') then
      add_work(base, -work_of(drec))
      if drec.s == 'blocked' then count_blocked(base, drec, -1) end
      count(base, 'ended:dep-failed', 1)
      drec.s = 'dep-failed'
      drec.why = 'dependency ' .. top[2] .. ' ' .. state .. ': ' .. reason
      drec.te = now
      save(jobs, drec)
      redis.call('ZREM', releasing, drec.id)
      for _, d in ipairs(drec.dn or {}) do stack[#stack + 1] = {d, drec.id} end
    end
  end
end
-- Create a task queue's definition and SubmitPool when they do not exist yet, registering the task queue
-- (as empty) in the heads index of every eligible queue.
-- A task queue created empty (its jobs blocked, or sent to be released) is marked in `tqempty` at once, so
-- it is cleaned if no job ever enters it (enqueue() unmarks it).
local function ensure_pool(base, tqdefs, poolstamp, tq, def, queues, now)
  if redis.call('HSETNX', tqdefs, tq, def) == 1 and redis.call('EXISTS', base .. K_TQ .. tq) == 0 then
    redis.call('ZADD', base .. K_TQEMPTY, 'NX', now, tq)
  end
  local poolkey = base .. K_POOL .. tq
  if redis.call('EXISTS', poolkey) == 0 and #queues > 0 then
    redis.call('SADD', poolkey, unpack(queues))
    redis.call('ZADD', poolstamp, now, tq)
    for _, q in ipairs(queues) do index_head(base, q, tq, EMPTY, 'NX') end
  end
end
-- Park a job that no operation can handle (its record or its task-queue member cannot be read): out of
-- every structure that would hand it on, into the `parked` hash (job id -> {"why", "t", "m", "at"}), where
-- `pilotfish explain` and `status` show it and the periodic reap logs it. The caller declares `parked`.
local function park(base, id, why, tq, member, now)
  redis.call('HSET', base .. K_PARKED, id, cjson.encode({why = why, t = tq or '', m = member or '', at = now}))
end
-- Wake as many idle pilots as this call enqueued jobs, in each catalog queue it enqueued jobs for, and no
-- more (issue 31). A pilot listens on one of its queue's WAKE_SHARDS channels (keys.wake_channel) only while
-- its last match found nothing (pilot.agent.wake), so PUBLISH answers how many such idle pilots heard it: the
-- shards are published in turn, from a place that moves from call to call, until as many idle pilots heard
-- it as jobs entered (each takes one at least), or every shard was. A job eligible in several queues counts in
-- each. A pilot that misses a wake (busy a moment ago, or its shard not reached) finds the job by its poll.
local function wake(base)
  local from = WAKE_FROM or 0
  for q, jobs in pairs(WAKE) do
    local heard = 0
    for i = 0, WAKE_SHARDS - 1 do
      heard = heard + redis.call('PUBLISH', base .. K_WAKE .. q .. ':' .. ((from + i) % WAKE_SHARDS), '1')
      if heard >= jobs then break end
    end
  end
end
-- After the writes of a script that moved jobs: the heads kept exact (sync_heads), idle pilots woken (wake), and
-- the control plane told which jobs it put in the releasing set (`releasing`, ids; keys.release_channel).
local function moved(base, now, releasing)
  sync_heads(base, now)
  wake(base)
  if #releasing > 0 then redis.call('PUBLISH', base .. K_RELEASE, table.concat(releasing, ' ')) end
end
-- A lease that expired while its pilot lived (issue 32): the store was paused (SIGSTOP, a frozen VM, a cut
-- network) longer than the lease, its run id did not change, so the reaper gave no grace and requeued the job
-- when it resumed, although its pilot still runs (or has finished) the payload. The requeue marks the record
-- with that pilot (lx) and the state it was in (ls); nobody matched the job since as long as it is still
-- waiting (or releasing) at the same attempt (a match counts the attempt up). Then that pilot's report or
-- heartbeat of that attempt takes it back: out of its task queue, back-off, releasing set and parked hash,
-- leased to its pilot again, its retry count as before the requeue, as if the lease had held. A job matched
-- again by anyone is refused as before. The cores its lease held under a shares policy were given back by the
-- requeue (fair_end) and are not counted again for the rest of this run.
local function requeued_from(rec, attempt, pilot)
  return rec ~= nil and rec.lx ~= nil and rec.lx == pilot and tostring(rec.a) == tostring(attempt)
    and (rec.s == 'waiting' or rec.s == 'releasing')
end
-- The keys take_back writes: the caller declares them (or answers needkeys) before its first write.
local function need_back(base, rec)
  if type(rec.t) == 'string' then need(base .. K_TQ .. rec.t) end
  need(base .. K_DELAYED)
  need(base .. K_RELEASING)
  need(base .. K_PARKED)
  need_heads(base)
end
-- A pilot's report of a job's end (complete.lua, fail.lua): the reason it is stale, or nil and whether the job
-- is to be taken back (its keys then declared).
local function check_end_report(base, rec, id, attempt, pilot)
  if requeued_from(rec, attempt, pilot) then
    need_back(base, rec)
    return nil, true
  end
  local bad = check_report(rec, id, attempt, {'matched', 'running'})
  if not bad and rec.pl ~= pilot then bad = 'job ' .. id .. ' is leased to ' .. tostring(rec.pl) end
  return bad, false
end
-- Take a job requeued_from(rec, attempt, pilot) back for its pilot (the caller saves the record, sets its
-- lease, and calls sync_heads once after its writes).
local function take_back(base, rec, pilot)
  if type(rec.t) == 'string' and type(rec.m) == 'string'
      and redis.call('ZREM', base .. K_TQ .. rec.t, rec.m) == 1 then
    touched(rec.t, nil)
  end
  redis.call('ZREM', base .. K_DELAYED, rec.id)
  redis.call('ZREM', base .. K_RELEASING, rec.id)
  redis.call('HDEL', base .. K_PARKED, rec.id)
  rec.s = rec.ls == 'running' and 'running' or 'matched'
  rec.pl = pilot
  rec.rt = (tonumber(rec.rt) or 1) - 1
  if rec.rt <= 0 then rec.rt = nil end
  rec.why, rec.lx, rec.ls = nil, nil, nil
  count(base, 'taken_back', 1)
end

-- ==== fair share and running limits (issue 18) ====
-- A lease taken while shares were configured (match.lua recorded the pilot's queue as fq) ends: its cores
-- leave the running counters of its group and owner (whose decayed usage is brought up to now first, with
-- the cores that ran until now), of its group at the site and queue, and its job leaves its type's count.
-- The fair and shares hashes are built from the key base (the community's hash tag), as match.lua does.
-- A counter never goes below 0 (one reset by hand while jobs ran). Every script that ends a lease calls it.
local function fair_end(base, rec, now)
  local q = rec.fq
  if type(q) ~= 'string' then return end
  rec.fq = nil
  local key = base .. K_FAIR
  local hl = tonumber(redis.call('HGET', base .. K_SHARES, 'halflife')) or 21600
  if hl <= 0 then hl = 21600 end
  local tau = hl / math.log(2)
  local g, o, ty = string.match(tostring(rec.t), '^[^.]+%.([^.]+)%.([^.]+)%.?(.*)$')
  if not g then g, o, ty = 'default', 'default', '' end
  local c = tonumber(string.match(tostring(rec.m), '^[^:]+:(%d+):')) or 0
  local site = string.match(q, '^([^/]+)/') or q
  local fields = {'u:' .. g, 'r:' .. g, 'u:' .. g .. '.' .. o, 'r:' .. g .. '.' .. o,
                  'c:' .. g .. '@' .. site, 'c:' .. g .. '@' .. q}
  if ty ~= '' then fields[#fields + 1] = 'n:' .. ty end
  local v = redis.call('HMGET', key, unpack(fields))
  local out = {}
  for i = 1, 3, 2 do
    local u, t = string.match(v[i] or '', '^(%S+) (%S+)$')
    u, t = tonumber(u) or 0, tonumber(t) or now
    local r = tonumber(v[i + 1]) or 0
    local k = math.exp(-math.max(now - t, 0) / tau)
    u = u * k + r * tau * (1 - k)
    out[#out + 1] = fields[i] out[#out + 1] = string.format('%.17g %.17g', u, now)
    out[#out + 1] = fields[i + 1] out[#out + 1] = string.format('%d', math.max(r - c, 0))
  end
  for i = 5, #fields do
    local less = i == 7 and 1 or c
    out[#out + 1] = fields[i] out[#out + 1] = string.format('%d', math.max((tonumber(v[i]) or 0) - less, 0))
  end
  redis.call('HSET', key, unpack(out))
end
-- ==== end of the fair-share block ====
-- The start of every call (the loader puts "begin(KEYS, ARGV)" in front of the script, below its line "-- per
-- call:"): every upvalue of this file that a call writes, set afresh, so that nothing of one call reaches the next
-- (not even of a call that failed half-way). A name added above that a call writes must be added here.
local function begin(keys, argv)
  KEYS, ARGV, SCRIPT, PROBLEM = keys, argv, '?', nil
  WAKE, WAKE_FROM, DECLARED, MISSING, TOUCHED, GH = {}, nil, nil, {}, {}, nil
  LOADED_STATE, LOADED_END, LOADED_WHY, LOADED_PILOT, LOADED_RAW = {}, {}, {}, {}, {}
  EVENT_BY, EVENT_NOW, EVENT_NOTE = nil, nil, nil
end
