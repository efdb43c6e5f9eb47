-- match: lease to one pilot the most urgent task-queue head that fits what it has free; optionally repeat
-- until nothing more fits (fill a multi-core pilot in one call).
-- KEYS[1]  qh zset of the pilot's queue (task-queue id -> score, never above the real head score)
-- KEYS[2]  stats hash: not written (see MATCHED below), declared as by every store script, so that a slot
--          move holds the call off while it copies the community (docs/operator/failover.md)
-- Every other key is built from the key base: the jobs hash, leases zset (job id -> expiry), tqempty zset,
-- heads hash (task-queue id -> "<score> <member> <floor>": its exact head; see _lib.lua; its field MATCHED
-- counts the jobs leased, see the end), qfloor hash (queue -> "cpu:mem:tmp:need" at or below every job its
-- index can reach), parked hash (job id -> why it was taken out of its task queue; see below) and resv hash
-- (catalog queue -> its one reservation; see "Reservations" below). Each declared key was a RESP argument,
-- a Redis string and a Lua string per call, and checking them against the base two strings more.
-- The task-queue zsets it touches (the one it leases from; one whose index entry has no heads entry) are
-- not declared either: it builds their keys from the key base, which carries the community's hash tag, so they hash
-- to the slot of every declared key, and Redis (standalone, or a Cluster node serving that slot) serves them
-- (tests/test_keys.py runs a community on a real two-node Cluster).
-- Declaring every task queue the queue can see (argument parsing and building KEYS), for the one or two a
-- call touches, was a fifth of a filling call's instructions and a third of a one-job call's when a queue
-- sees 100 task queues (scripts/count_match.py, rows 1000:fill and 1000:one).
-- The hot path: this script does not use _lib.lua's helpers (closures built per call); its own pure
-- functions are made once, when the library loads (above the line "-- per call:"). It reads the
-- heads hash, never a task-queue zset, to decide: only the task queue it leases from is touched. The index
-- is read once per call, a page at a time, into one flat table; every write to the index, the heads, the
-- records and the leases is made once at the end, one command each, however many jobs the call leased.
-- Tables, closures and their upvalues cost as much as Redis commands here: few of each, and one loop. What a
-- call does not use it does not build: the reservations' closures only with reservations on, and a
-- pilot below its queue's floor stops walking once its reservation is decided (or no job fits its total).
-- ARGV[1]  key base "<prefix>:{<vo>}:"
-- ARGV[2]  pilot id
-- ARGV[3]  now (unix seconds)
-- ARGV[4]  lease length (seconds)
-- ARGV[5]  free cores      ARGV[6] free memory (MB)      ARGV[7] free scratch (MB)
-- ARGV[8]  seconds left (negative = unbounded), compared with each member's need: the seconds the job must
--          find left, its wall or its estimate with a safety factor (taskqueues.store.records.time_needed)
-- ARGV[9]  how many jobs at most
-- ARGV[10] what the pilot runs, for reservations: "d:cpu:mem:tmp" per running job, one blank apart, by d
--          ascending (d = seconds until its estimated end, 0 if overdue); "" when it runs nothing; "-" turns
--          reservations off for this call (the match of old, strict)
-- ARGV[11] reservation slack (seconds): a reservation whose start passed by this much is dropped; with the
--          suffix ":b" the reservation is bounded (issue 29, see "Reservations")
-- ARGV[12] optional: the per-job cap "cpu:mem:tmp" (whole numbers): each job leased must fit it, while the jobs
--          together fit ARGV[5..7]. A pilot's prefetch offers the room of its hold (several pilots' worth)
--          with its own size as the cap (pilot.agent.prefetch): a one-core pilot leases two one-core jobs in
--          one call, never a two-core job. Without it (11 ARGV) the cap is the offer itself, as of old. Only
--          with ARGV[10] "-" (reservations weigh what is free now, not a hold's room).
-- Returns  {id1, record1, id2, record2, ...} (records as stored after the lease: without their id, with the
--          member's tail as mt; see _lib.lua's load/save)
--          With shares configured, a lease also records the pilot's queue as fq, and the running counters
--          and usage of the fair hash grow (see the fair-share block below; _lib.lua's fair_end undoes them)
-- Arguments are checked in line, a comparison each (NaN fails every one), and a bad call is refused before
-- anything is read. One bad entry never fails the call: a heads entry that cannot be read is mended from its
-- task queue; a member that cannot be read, or whose record is missing, unreadable, not waiting or names
-- another member, is taken out of its task queue into the parked hash (job id -> {"why", "t", "m", "at"};
-- `pilotfish explain` and `status` show it, the periodic reap logs it) and the walk goes on to the next
-- head in the same call.

-- ==== fair share: the policy's functions, made once when the library loads (issue 31) ====
-- Everything above the line "-- per call:" runs once, when the library loads (taskqueues/store/functions.py,
-- wrapped): a closure made per call cost a policy call about 1.5k instructions. These functions keep no call's
-- state for the next: every upvalue they read that a call sets (FS, PT, PC, GS, XS and those below) is set by
-- fs_begin at the start of each call with a policy, and they are called only by such a call. What they keep
-- from one call to the next is what a text gives whenever it is the same (POLICIES, ACCTS): the numbers of a
-- packed policy, the names a group's state is made of, a task queue's account; a group's state is that kept
-- entry, whose per-call fields fs_begin sets afresh, and its last account leased (`last`) is only a hint of
-- which fields to read with the groups'. No value read from Redis is read by a later call (the last policy call's
-- state stays referenced, unread, until the next one's fs_begin replaces it).
local FS, PT, PC, GS, XS -- the call's fair-share state, its policy (packed, and POLICIES' entry), its groups
local FNOW, FAT, FFAIR -- the call's now, as a number and as ARGV[3] wrote it, and its fair hash's key
-- Packed policy -> {cfg = its numbers by name (false: none), tau, lo, hi (the catch-up cap's bounds), limits,
-- types, owned (whether it has running limits, limits per type, owner shares), b = key base -> {fair (the fair
-- hash's key), q = queue -> {site, g = group -> the names and numbers of a group's state there}}}. At most 64
-- policies, 64 bases a policy, 1000 queues a base and 1000 groups a queue: then forgotten and made again.
local POLICIES, NPOLICIES = {}, 0
-- Task-queue id -> {group, group.owner, type or false, 'u:' .. group.owner, 'r:' .. group.owner, 'n:' .. type
-- or false, 'r:' .. group, 'u:' .. group}; at most 10000, then forgotten.
local ACCTS, NACCTS = {}, 0
-- Tables each call with a policy fills afresh (fs_begin): its groups' states in order, the fair fields it reads.
local GSL, FIELDS = {}, {}
-- A number of the policy (nil when it has none), found once.
local function fs_conf(name)
  local cfg = PC.cfg
  local v = cfg[name]
  if v == nil then
    local _, e = string.find(PT, ' ' .. name .. '=', 1, true)
    v = e and tonumber(string.match(PT, '^%S*', e + 1)) or false
    cfg[name] = v
  end
  return v or nil
end
-- A field of the fair hash (false when it has none), read once per call.
local function fs_get(field)
  local v = FS.h[field]
  if v == nil then
    v = redis.call('HGET', FFAIR, field) or false
    FS.h[field] = v
  end
  return v
end
-- The account of a task queue (ACCTS).
local function fs_acct(tq)
  local a = ACCTS[tq]
  if not a then
    local g, o, ty = string.match(tq, '^[^.]+%.([^.]+)%.([^.]+)%.?(.*)$')
    if not g then g, o, ty = 'default', 'default', '' end
    local go = g .. '.' .. o
    a = {g, go, ty ~= '' and ty or false, 'u:' .. go, 'r:' .. go, ty ~= '' and 'n:' .. ty or false, 'r:' .. g,
         'u:' .. g}
    if NACCTS >= 10000 then ACCTS, NACCTS = {}, 0 end
    ACCTS[tq], NACCTS = a, NACCTS + 1
  end
  return a
end
local function fs_num(field) return tonumber(fs_get(field)) or 0 end
local function fs_two(u, t) return u + 0, t + 0 end
-- Effective usage of decayed usage u and running cores r: u (clamped by the catch-up cap) + r * tau.
local function fs_eff(u, r)
  local t = r * PC.tau
  if PC.hi then u = math.min(math.max(u, t * PC.lo), t * PC.hi) end
  return u + t
end
-- Effective usage of account a (a group, or group.owner) now: its decayed core-seconds (its field uf, "U t")
-- plus its running cores (its field rf) times tau.
local function fs_usage(a, uf, rf)
  local e = FS.E[a]
  if not e then
    local h = FS.h
    local v = h[uf]
    if v == nil then v = fs_get(uf) end
    local u, t = string.match(v or '', '^(%S+) (%S+)$')
    if u then -- 17-digit numbers: one strtod each by arithmetic (tonumber makes two), tonumber if not numbers
      local ok, x, y = pcall(fs_two, u, t)
      if ok then u, t = x, y else u, t = tonumber(u), tonumber(t) end
    end
    u, t = u or 0, t or FNOW
    v = h[rf]
    if v == nil then v = fs_get(rf) end
    local r = tonumber(v) or 0
    local tau = PC.tau
    local k = math.exp(-math.max(FNOW - t, 0) / tau)
    FS.U[a] = u * k + r * tau * (1 - k)
    e = fs_eff(FS.U[a], r)
    FS.E[a] = e
  end
  return e
end
local function fs_share(a, default)
  local s = fs_conf('s:' .. a) or default
  if not s or s <= 0 then return 1e-9 end
  return s
end
local function fs_grank(st)
  local r = st.rank
  if not r then
    r = fs_usage(st.g, st.u, st.r) / st.share
    st.rank = r
  end
  return r
end
-- The cores a group's running limits leave (with limits only: st.room is math.huge without).
local function fs_groom(st)
  local cores = st.room
  if not cores then
    cores = math.huge
    if st.l1 then cores = math.min(cores, st.l1 - fs_num(st.r)) end
    if st.l2 then cores = math.min(cores, st.l2 - fs_num(st.cs)) end
    if st.l3 then cores = math.min(cores, st.l3 - fs_num(st.cq)) end
    st.room = cores
  end
  return cores
end
-- The rank of a task queue's owner inside its group (0 unless the group gives its owners shares).
local function fs_orank(tq, st)
  if not st.owners then return 0 end
  local r = FS.rank[tq]
  if not r then
    local a = fs_acct(tq)
    r = fs_usage(a[2], a[4], a[5]) / fs_share(a[2], fs_conf('s:' .. a[1] .. '.*') or 1)
    FS.rank[tq] = r
  end
  return r
end
-- Whether a job of task queue tq stays within the limit of its type (with limits per type only).
local function fs_typed(tq)
  local room = FS.room[tq]
  if not room then
    local a = fs_acct(tq)
    local l = a[3] and fs_conf('t:' .. a[3])
    room = l and l - fs_num(a[6]) or math.huge
    FS.room[tq] = room
  end
  return room >= 1
end
-- Whether entry x (its cores read) stays within every running limit.
local function fs_allowed(X, x)
  local st = XS[x]
  return X[x + 4] <= (st.room or fs_groom(st)) and not (PC.types and not fs_typed(X[x + 1]))
end
-- Whether entry x goes before entry b in the policy's order: (group rank, owner rank, score, task-queue id);
-- the reservations' decision alone asks it.
local function fs_order(X, x, b)
  local sx, sb = XS[x], XS[b]
  local x1, b1 = sx.rank or fs_grank(sx), sb.rank or fs_grank(sb)
  if x1 ~= b1 then return x1 < b1 end
  local x2, b2 = sx.owners and fs_orank(X[x + 1], sx) or 0, sb.owners and fs_orank(X[b + 1], sb) or 0
  if x2 ~= b2 then return x2 < b2 end
  if X[x + 2] ~= X[b + 2] then return X[x + 2] < X[b + 2] end
  return X[x + 1] < X[b + 1]
end
-- A group none of whose task queues may lease (its cores' room below the queue's floor, FS.floor, or below 0
-- without a floor) counts as read. An unread entry of a group ranks (its group's rank, 0 or more, a score at
-- or above its bound): whether one may go before entry y (fs_order) is told by its group alone.
local function fs_final(X, y)
  local sy = XS[y]
  local y1, y2 = sy.rank or fs_grank(sy), sy.owners and fs_orank(X[y + 1], sy) or 0
  for _, st in ipairs(GS) do
    if not (st.all or (st.room or fs_groom(st)) < FS.floor) then -- not shut
      local g1 = st.rank or fs_grank(st)
      if g1 < y1 or (g1 == y1 and (y2 > 0 or X[y + 2] >= st.bound)) then return false end
    end
  end
  return true
end
-- The group whose next page may hold an entry that goes before all others unread: the lowest (rank, bound);
-- nil when every group is read (or shut).
local function fs_next()
  local best, b1
  for _, st in ipairs(GS) do
    if not (st.all or (st.room or fs_groom(st)) < FS.floor) then -- not shut
      local g1 = st.rank or fs_grank(st)
      if not best or g1 < b1 or (g1 == b1 and st.bound < best.bound) then best, b1 = st, g1 end
    end
  end
  return best
end
-- A lease of `c` cores from task queue tq begins (sign 1) or is taken back (-1: its record was parked).
local function fs_take(tq, c, sign)
  local a, h = fs_acct(tq), FS.h
  local ua, ra, ty = a[4], a[5], a[6]
  if h[ua] == nil then
    local got = redis.call('HMGET', FFAIR, ua, ra, ty or ra)
    h[ua], h[ra] = got[1] or false, got[2] or false
    if ty and h[ty] == nil then h[ty] = got[3] or false end
  end
  if PC.types then FS.room = {} end
  if PC.owned then FS.rank = {} end
  local st, limits, g = nil, PC.limits, a[1]
  for _, s in ipairs(GS) do
    s.rank = nil
    if limits then s.room = nil end
    if s.g == g then st = s end
  end
  local dirty, w = FS.dirty, FS.w
  if not dirty then dirty, w = {}, {} FS.dirty, FS.w = dirty, w end
  -- (fs_usage and fs_num in line where the value is at hand: a Lua call costs about 300 instructions)
  local E, U = FS.E, FS.U
  for i = 1, 2 do
    local name, rf = a[i], a[i == 1 and 7 or 5]
    if not E[name] then fs_usage(name, a[i == 1 and 8 or 4], rf) end
    local v = h[rf]
    if v == nil then v = fs_get(rf) end
    local r = (tonumber(v) or 0) + sign * c
    h[rf] = r
    E[name] = fs_eff(U[name], r)
    dirty[name] = a
  end
  st.last = a -- the group's last account leased here: the next call reads its fields with the groups' (a hint)
  local cs, cq = st.cs, st.cq
  local v = h[cs]
  if v == nil then v = fs_get(cs) end
  h[cs] = (tonumber(v) or 0) + sign * c
  v = h[cq] -- after cs: a queue named without a site has cs == cq, counted twice as before
  if v == nil then v = fs_get(cq) end
  h[cq] = (tonumber(v) or 0) + sign * c
  w[cs], w[cq] = true, true
  if ty then h[ty], w[ty] = fs_num(ty) + sign, true end
end
-- The counters this call changed, written once.
-- (the counters are whole numbers, written without a point; the decayed usage is written exactly, see ZADD below)
local function fs_write()
  if not FS.dirty then return end
  local out, h, n = {}, FS.h, 0
  -- the time as the caller wrote it when it is plain decimals (it reads as `now`): one %.17g the less
  local at = string.find(FAT, '^%d+%.?%d*$') and FAT or string.format('%.17g', FNOW)
  for name, a in pairs(FS.dirty) do
    local g = name == a[1]
    local rf = a[g and 7 or 5]
    out[n + 1], out[n + 2] = a[g and 8 or 4], string.format('%.17g %s', FS.U[name], at)
    out[n + 3], out[n + 4] = rf, h[rf]
    n = n + 4
  end
  for field in pairs(FS.w) do out[n + 1], out[n + 2] = field, h[field] n = n + 2 end
  redis.call('HSET', FFAIR, unpack(out))
end
-- The index scores a call writes (zq: score, task-queue pairs) written to the queue's index by group too (with a
-- policy mark, read or not): one ZADD a group, of zq itself when every pair is of one group.
local function fs_index(base, queue, zq)
  local g1, by = fs_acct(zq[2])[1], nil
  for i = 3, #zq, 2 do
    local g = fs_acct(zq[i + 1])[1]
    if g ~= g1 and not by then
      by = {[g1] = {unpack(zq, 1, i - 1)}}
    end
    if by then
      local z = by[g]
      if not z then z = {} by[g] = z end
      z[#z + 1] = zq[i] z[#z + 1] = zq[i + 1]
    end
  end
  if not by then by = {[g1] = zq} end
  for g, z in pairs(by) do redis.call('ZADD', base .. K_GH .. queue .. ':' .. g, unpack(z)) end
end
-- The call's fair-share state: of the key base, the queue, now (a number, and
-- as ARGV[3] wrote it), the policy packed (" name=value ... "), the groups of the queue's index by group, the
-- jobs wanted and the queue's floor of cores (0 without one). Returns FS, GS, XS (set here as the functions'
-- upvalues too).
-- The walk by group: GS holds a state per group of the queue's index by group: {g, t (its names and numbers,
-- POLICIES), key, n entries read, bound (every unread entry's index score, hence its real one, is at or above
-- it), all (none left), size (of its next page), share, owners, and until a lease changes the counters (fs_take
-- empties them) rank (E / share) and room (the cores its limits leave: overall, at the pilot's site, at its
-- queue)}. XS maps each entry read to its group's state: the walk weighs every entry read against the best so
-- far, and what it weighs comes from the group (names of fields, string concatenations, were most of its cost),
-- per task queue only for a group that shares among its owners or a policy with limits per job type.
local function fs_begin(base, queue, now, at, packed, groups, want, floor)
  PT, FNOW, FAT = packed, now, at
  local pc = POLICIES[packed]
  if not pc then
    if NPOLICIES >= 64 then POLICIES, NPOLICIES = {}, 0 end
    pc = {cfg = {}, b = {}, nb = 0, tau = 21600 / math.log(2), limits = string.find(packed, ' l:', 1, true),
          types = string.find(packed, ' t:', 1, true), owned = string.find(packed, ' s:[^%s=.]+%.')}
    PC = pc -- fs_conf reads it
    local hl = fs_conf('halflife')
    if hl and hl > 0 then pc.tau = hl / math.log(2) end
    -- The catch-up cap x (issue 29): in ranks, U is clamped into R * tau * [1 - d, 1 + d], d = 2 (x - 1) / (x + 1),
    -- so no group runs more than x times another's cores per share (taskqueues/store/fairshare.py, Policy.clamp).
    local x = fs_conf('catchup')
    if x and x >= 1 then pc.lo, pc.hi = 1 - 2 * (x - 1) / (x + 1), 1 + 2 * (x - 1) / (x + 1) end
    POLICIES[packed], NPOLICIES = pc, NPOLICIES + 1
  end
  PC = pc
  local b = pc.b[base]
  if not b then
    if pc.nb >= 64 then pc.b, pc.nb = {}, 0 end
    b = {fair = base .. K_FAIR, q = {}, nq = 0}
    pc.b[base], pc.nb = b, pc.nb + 1
  end
  local q = b.q[queue]
  if not q then
    if b.nq >= 1000 then b.q, b.nq = {}, 0 end
    q = {site = string.match(queue, '^([^/]+)/') or queue, g = {}, ng = 0}
    b.q[queue], b.nq = q, b.nq + 1
  end
  FFAIR = b.fair
  FS = {h = {}, U = {}, E = {}, floor = floor, rank = pc.owned and {} or nil, room = pc.types and {} or nil}
  XS = {}
  local gs, fields, k, limits, qg = GSL, FIELDS, 0, pc.limits, q.g
  local ng = 0
  for _, g in ipairs(groups) do
    if g ~= '~' then
      local t = qg[g]
      if not t then
        local site = q.site
        t = {g = g, key = base .. K_GH .. queue .. ':' .. g, share = fs_share(g, fs_conf('s:*') or 1),
             owners = pc.owned and string.find(packed, ' s:' .. g .. '.', 1, true) or false,
             u = 'u:' .. g, r = 'r:' .. g, cs = 'c:' .. g .. '@' .. site, cq = 'c:' .. g .. '@' .. queue}
        if limits then
          t.l1, t.l2, t.l3 = fs_conf('l:' .. g .. '@*'), fs_conf('l:' .. g .. '@' .. site), fs_conf('l:' .. g .. '@' .. queue)
        end
        if q.ng >= 1000 then qg, q.ng = {}, 0 q.g = qg end
        qg[g], q.ng = t, q.ng + 1
      end
      -- The group's state is its entry of POLICIES, what a call changes set here (room: math.huge without limits,
      -- never computed, never reset: fs_take).
      t.n, t.bound, t.all, t.size, t.rank, t.room = 0, -1e18, false, want + 2, nil, not limits and math.huge or nil
      ng = ng + 1
      gs[ng] = t
      fields[k + 1], fields[k + 2], fields[k + 3], fields[k + 4] = t.u, t.r, t.cs, t.cq
      k = k + 4
      local a = t.last -- read with them: fs_take then reads no more for a job of that account
      if a then fields[k + 1], fields[k + 2], fields[k + 3] = a[4], a[5], a[6] or a[5] k = k + 3 end
    end
  end
  -- The fair hash's fields of the groups (what the walk weighs, and a lease adds to), in one read; fs_take reads
  -- those of a leased job's owner and type in one more, fs_get any other when first needed.
  for i = ng + 1, #gs do gs[i] = nil end
  GS = gs
  if k > 0 then
    local got, h = redis.call('HMGET', FFAIR, unpack(fields, 1, k)), FS.h
    for i = 1, k do h[fields[i]] = got[i] or false end
  end
  return FS, GS, XS
end
-- ==== end of the policy's functions ====

-- ==== the walk's and the lease's pure functions, made once when the library loads too ====
-- The scores of a page's heads entries (read into X), and on the first page the count of jobs leased (the
-- entry after them): by arithmetic, in a pcall (below). No upvalues: a closure's upvalues cost a call.
-- A call's numeric arguments (ARGV[3..9]) and its slack's text, read by arithmetic (in the call's pcall).
local function numbers(a, s)
  return a[3] + 0, a[4] + 0, a[5] + 0, a[6] + 0, a[7] + 0, a[8] + 0, a[9] + 0, s + 0
end
local function scores(X, entries, x0, k, o)
  for i = 1, k do
    local entry = entries[i + o]
    local text = entry and string.match(entry, '^%S+')
    X[x0 + 7 * i - 5] = text and text + 0
  end
  return o == 1 and (entries[1] or 0) + 0
end
-- The lease, as cjson would write it, without decoding the record: cjson writes no blanks and nested JSON
-- is kept as text, so '"s":"waiting"', '"a":', '"tm":' and 'mt":"<tail>"' can only be the record's own
-- fields (no other field name ends in mt). Plain finds and one splice (pattern scans over the whole text cost
-- more than cjson; every C call costs as much as a few dozen Lua instructions); the record must name the
-- member the job was taken from (`tail`, after the job id). Any other form: decode/encode. That the record
-- has no pl and no tm is looked for as 'pl":' and 'tm":' (a rarer first byte than '"', which plain find
-- looks for first): a field name merely ending so only sends the record down the decode/encode path.
-- Returns the leased record, or nil and why the member must be parked.
local function leased(raw, tail, pilot, now, lease, FS, queue)
  if not raw then return nil, 'it has no record' end
  local s = string.find(raw, '"s":"waiting"', 1, true)
  if s and string.find(raw, 'mt":"' .. tail .. '"', 2, true)
      and not string.find(raw, 'pl":', 1, true) and not string.find(raw, 'tm":', 1, true) then
    local a = string.find(raw, '"a":', 1, true)
    local digits = a and string.match(raw, '^%d+', a + 4)
    -- One concatenation of the record's pieces around the state and the attempt, in the order they come.
    if not a then return string.sub(raw, 1, s + 4) .. 'matched' .. string.sub(raw, s + 12, -2) .. ',"a":1' .. lease end
    if digits then
      local e = a + 4 + #digits
      if a < s then
        return string.sub(raw, 1, a + 3) .. (digits + 1) .. string.sub(raw, e, s + 4) .. 'matched'
          .. string.sub(raw, s + 12, -2) .. lease
      end
      return string.sub(raw, 1, s + 4) .. 'matched' .. string.sub(raw, s + 12, a + 3) .. (digits + 1)
        .. string.sub(raw, e, -2) .. lease
    end
  end
  local ok, rec = pcall(cjson.decode, raw)
  if not ok or type(rec) ~= 'table' then return nil, 'its record cannot be read' end
  if rec.s ~= 'waiting' then return nil, 'its record is ' .. tostring(rec.s) .. ': a stray task-queue member' end
  if rec.mt ~= tail then return nil, 'its record names another task-queue member' end
  if rec.a ~= nil and (type(rec.a) ~= 'number' or rec.a ~= math.floor(rec.a) or rec.a < 0) then
    return nil, 'its record has an unreadable attempt'
  end
  rec.s = 'matched'
  rec.a = (rec.a or 0) + 1
  rec.pl = pilot
  rec.tm = now
  if FS then rec.fq = queue end
  local written, text = pcall(cjson.encode, rec)
  if not written then return nil, 'its record cannot be written back' end
  return text
end

-- per call:
local nargs = #ARGV
if #KEYS ~= 2 or nargs ~= 11 and nargs ~= 12 then
  return redis.error_reply('match: wants 2 KEYS and 11 or 12 ARGV, got ' .. #KEYS .. ' and ' .. nargs)
end
local base, pilot = ARGV[1], ARGV[2]
-- Texts known to be numbers are read by arithmetic: one strtod each, where tonumber makes two (and strtod
-- was 7% of a call). The arguments in a pcall, so that one that is not a number is named by the checks below.
-- The slack (ARGV[11]) is split from its suffix (":b", bounded) by one match, and read with the others.
local stext, suffix = string.match(ARGV[11], '^([^:]*)(.*)$')
local ok, now, length, cpu, mem, tmp, left, want, slack = pcall(numbers, ARGV, stext)
if not ok then
  now, length, cpu, mem, tmp, left = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
    tonumber(ARGV[7]), tonumber(ARGV[8])
  want, slack = tonumber(ARGV[9]), tonumber(stext)
end
local bounded = suffix == ':b'
if not (bounded or suffix == '') then slack = nil end
local qh, index = KEYS[1], base .. K_QH
local queue = string.sub(qh, #index + 1)
local jobs, heads, qfloor = base .. K_JOBS, base .. K_HEADS, base .. K_QFLOOR
local bad
if queue == '' or index .. queue ~= qh or KEYS[2] ~= base .. K_STATS then
  bad = 'KEYS want the keys ' .. index .. '<queue> and ' .. base .. K_STATS .. ' (of the base ARGV[1])'
elseif pilot == '' or #pilot > 256 then bad = 'ARGV[2] (pilot id) wants 1 to 256 bytes'
elseif not (now and now >= 0 and now <= 1e12) then bad = 'ARGV[3] (now) wants a number in [0, 1e12]'
elseif not (length and length > 0 and length <= 1e12) then bad = 'ARGV[4] (lease length) wants a number in (0, 1e12]'
elseif not (cpu and cpu >= 0 and cpu <= 1e15) then bad = 'ARGV[5] (free cores) wants a number in [0, 1e15]'
elseif not (mem and mem >= 0 and mem <= 1e15) then bad = 'ARGV[6] (free memory) wants a number in [0, 1e15]'
elseif not (tmp and tmp >= 0 and tmp <= 1e15) then bad = 'ARGV[7] (free scratch) wants a number in [0, 1e15]'
elseif not (left and left >= -1e15 and left <= 1e15) then
  bad = 'ARGV[8] (seconds left) wants a number in [-1e15, 1e15]'
elseif not (want and want >= 1 and want <= 100000 and want % 1 == 0) then
  bad = 'ARGV[9] (jobs wanted) wants a whole number in [1, 100000]'
elseif not (slack and slack >= 0 and slack <= 1e12) then
  bad = 'ARGV[11] (reservation slack) wants a number in [0, 1e12], with ":b" or not'
end
-- The per-job cap (ARGV[12]) and, with it, what the jobs leased may still take together (rc, rm, rt): then
-- cpu, mem and tmp, which every fit test reads, are the lesser of the two (kept so at each lease below).
local cc, cm, ct, rc, rm, rt
if nargs == 12 and not bad then
  cc, cm, ct = string.match(ARGV[12], '^(%d+):(%d+):(%d+)$')
  cc, cm, ct = tonumber(cc), tonumber(cm), tonumber(ct)
  if not (cc and cc <= 1e15 and cm <= 1e15 and ct <= 1e15) then
    bad = 'ARGV[12] (per-job cap) wants "cpu:mem:tmp", whole numbers in [0, 1e15]'
  elseif ARGV[10] ~= '-' then
    bad = 'ARGV[12] (per-job cap) wants ARGV[10] "-" (no reservations)'
  else
    rc, rm, rt, cpu, mem, tmp = cpu, mem, tmp, math.min(cpu, cc), math.min(mem, cm), math.min(tmp, ct)
  end
end
if bad then return redis.error_reply('match: ' .. bad .. ', got ' .. cjson.encode(ARGV)) end
local EMPTY, EMPTY_TEXT = 1e18, '1e18'

-- == Reservations (EASY backfill, as Slurm's backfill and HTCondor's multi-core pilots do) ===============
-- When the most urgent head that fits the pilot's total (free + what its running jobs hold) does not fit
-- what it has free, the queue reserves it (one reservation per catalog queue: bounded work) on the pilot
-- that will have room for it soonest, by its running jobs' estimated ends (ARGV[10]): the first pilot to
-- ask reserves, and a pilot that would start it strictly sooner takes the reservation over. The pilot
-- holding it leases a less urgent head only if that head's need (records.time_needed: its wall or its
-- estimate with the safety factor, never below the estimate) ends before the reserved start, or if it fits
-- in what the reserved job leaves over at that start (EASY backfill). A head at least as urgent as the
-- reserved one is never held back; a pilot that does not hold the reservation is not restricted at all,
-- and a call without one is the strict match of old. A reservation goes when its job is no longer its task
-- queue's head (leased, cancelled), when a more urgent head needs one, or, its start passed by the slack
-- (ARGV[11]: an estimate was wrong, the pilot died), it is marked expired: it holds nothing, and its job is
-- not reserved on that pilot again (another pilot may).
-- Bounded (":b" on ARGV[11], issue 29): the holding pilot also leases a less urgent head whose score (the date
-- by which it should start) is less than its own need after the reserved start, so a reservation never holds
-- back a job past the date it should start by, less its own run.
-- resv field: "<state r|x> <tq> <job> <score> <cpu> <mem> <tmp> <need> <start> <at> <pilot>".
local RV = ARGV[10] ~= '-'
local RB = bounded
-- the pilot's running jobs, 4 slots each: seconds until the estimated end, cpu, mem, tmp (a table only with
-- reservations on: a table costs a call as much as a C function's call)
local PD
local R, rdirty -- the queue's reservation (a table), and whether it must be written back (nil: deleted)
local rs, rtq, rscore, ec, em, et -- while this pilot holds it: start, task queue, score, left over then
local decided, reserve, lend
local tc, tm, tt = cpu, mem, tmp -- the pilot's total: free + what its running jobs hold
if RV then
  PD = {}
  -- One anchored find per running job (no second pass to count them), the totals added on the way.
  local text, pos, prev = ARGV[10], 1, 0
  while pos <= #text do
    local _, e, d, c, m, t = string.find(text, '^([^:%s]+):(%d+):(%d+):(%d+) ?', pos)
    d = e and tonumber(d)
    if not (d and d >= prev and d <= 1e12) then
      return redis.error_reply('match: ARGV[10] (running jobs) wants "d:cpu:mem:tmp" by d ascending, got '
        .. cjson.encode(ARGV[10]))
    end
    c, m, t = c + 0, m + 0, t + 0 -- digits: one strtod each by arithmetic
    local k = #PD
    PD[k + 1], PD[k + 2], PD[k + 3], PD[k + 4] = d, c, m, t
    tc, tm, tt, prev, pos = tc + c, tm + m, tt + t, d, e + 1
  end
end
-- (the rest of the reservations' code comes once the walk's tables exist, below)

-- ==== fair share and running limits (issue 18): this block, fs_* calls below, nothing else ====
-- Active only when the community's shares hash is not empty (`pilotfish shares FILE` writes it; see
-- taskqueues/fairshare.py for its fields) and the qfloor hash marks it (above); without it FS is nil and the
-- match is the strict one, at no cost: the mark comes with the floor's read.
-- Like the task queues, the shares and fair hashes are not declared: built from the key base, they carry the
-- community's hash tag. A task-queue id "<hash>.<group>.<owner>[.<type>]" names its account
-- (taskqueues.store.fairshare.account_tq); an id without one belongs to the group and owner "default".
-- The rule (Slurm's fair-share factor, with running cores counted at once): a group's effective usage is
-- E = U + R * tau, U its core-seconds decayed with the half-life (tau = half-life / ln 2, updated lazily
-- from "U t" when R, its running cores, changes), and the group with the lowest E / share that has a head
-- that fits is served first; inside it, when the group gives its owners shares, the owner with the lowest
-- E / share; then the most urgent head (today's order). A head whose lease would pass a running limit
-- (cores of its group overall, at the pilot's site or queue; jobs of its type) is skipped.
-- With FS the walk reads the queue's heads index by group (GROUPS, GS below), a group's page at a time in the
-- policy's order, until no unread entry can go first (fs_final): not the whole index (issue 31).
-- The policy is read, packed, from the qfloor hash's mark (below), and the fair hash field by field when first
-- needed (a pilot's ACL grants HGET, not HGETALL: taskqueues/store/access.py).
-- The queue's floor and whether the community has a policy, in one read: `pilotfish shares` (fairshare.publish)
-- marks the qfloor hash's field "" (never a queue's name) while the shares hash holds one.
local floor_text, policy = unpack(redis.call('HMGET', qfloor, queue, ''))
local FS -- the call's fair-share state (fs_begin, after the floor's read below); nil without a policy
-- The heads index by group (issue 31; _lib.lua's index_head keeps it): while the community has a policy, the
-- queue's index split by group, K_GH .. queue .. ':' .. group, with the groups in the set K_GH .. queue. Built
-- here the first time a policy match of the queue finds none (a store written before it existed, or a policy
-- just stored), kept at the end of every call with a policy (the index scores this call writes).
local GROUPS, GS, XS -- the groups of the queue's index by group, and the walk's state per group (fs_final)
-- The queue's floor (below): declared here for the walk by group, read after the fair-share block.
local f1, f2, f3, f4
if policy then
  local gset = base .. K_GH .. queue
  GROUPS = redis.call('SMEMBERS', gset)
  if #GROUPS == 0 then
    local by, list = {}, {}
    local entries = redis.call('ZRANGEBYSCORE', qh, '-inf', '1e18', 'WITHSCORES')
    for i = 1, #entries, 2 do
      local tq = entries[i]
      local g = string.match(tq, '^[^.]+%.([^.]+)%.[^.]') or 'default'
      local z = by[g]
      if not z then z = {} by[g] = z list[#list + 1] = g end
      z[#z + 1] = entries[i + 1] z[#z + 1] = tq
      if #z >= 2000 then redis.call('ZADD', gset .. ':' .. g, unpack(z)) by[g] = {} end
    end
    for g, z in pairs(by) do
      if #z > 0 then redis.call('ZADD', gset .. ':' .. g, unpack(z)) end
    end
    redis.call('SADD', gset, '~', unpack(list))
    redis.call('SADD', base .. K_GHQ, queue)
    GROUPS = list
  end
end
-- The policy, packed: " name=value name=value ... " (the shares hash's fields, fairshare.Policy.packed).
local PT
if policy then
  -- The mark is the policy, packed (fairshare.publish): read with the floor, no command of its own, and no
  -- table decoded: fs_conf finds a field the first time the call needs it. A mark "1" (a policy published
  -- before the mark carried it) sends the call to the shares hash's field json, as before, packed here.
  PT = policy
  if string.byte(PT, 1) ~= 32 then
    local text = PT == '1' and redis.call('HGET', base .. K_SHARES, 'json') or PT
    local ok, cfg = false, nil
    if text then ok, cfg = pcall(cjson.decode, text) end
    PT = nil
    if ok and type(cfg) == 'table' then
      local parts = {''}
      for field, v in pairs(cfg) do
        if type(field) == 'string' and type(v) == 'string' and not string.find(field .. v, '[%s=]') then
          parts[#parts + 1] = field .. '=' .. v
        end
      end
      parts[#parts + 1] = ''
      PT = table.concat(parts, ' ')
    end
  end
end
-- (the policy's functions are made once, when the library loads: above, before "-- per call:")
-- ==== end of the fair-share block ====

-- What a lease adds to a record, and its expiry: made at the first lease (a call that leases nothing, as
-- for a pilot that nothing fits, costs little more than a trivial script).
local lease, expiry

if floor_text then
  f1, f2, f3, f4 = string.match(floor_text, '^(%d+):(%d+):(%d+):(%d+)$') -- whole numbers: read by arithmetic
  if f1 then
    f1, f2, f3, f4 = f1 + 0, f2 + 0, f3 + 0, f4 + 0
  else
    f1, f2, f3, f4 = string.match(floor_text, '^([^:]+):([^:]+):([^:]+):([^:]+)$')
    if f1 then f1, f2, f3, f4 = tonumber(f1), tonumber(f2), tonumber(f3), tonumber(f4) end
  end
  if not (f1 and f2 and f3 and f4) then f1 = nil end -- unreadable: as if there were none (a walk rewrites it)
end
if PT then FS, GS, XS = fs_begin(base, queue, now, ARGV[3], PT, GROUPS, want, f1 or 0) end

-- The index entries read so far, in index order, 7 slots each: entry i starts at slot x = 7 * (i - 1) and
-- holds its task queue (x+1), its real head's score (x+2, EMPTY once the task queue has none) and heads
-- entry (x+3), and that head's exact cpu, mem, tmp and need (x+4..x+7), false until an entry
-- first could beat the best so far: parsing numbers (strtod) and captures were most of a match's cost.
-- Every entry not read yet has an index score, hence a real score, at or above `bound`; `all` once none
-- is left. A page has room for every job still wanted and two more, twice as much each time a page in a
-- row brings nothing that can be taken yet (every entry read costs a reply, a string and a strtod).
local X = {}
local n, bound, all = 0, -EMPTY, false
if FS and #GS == 0 then all = true end -- a policy, and no group indexed here: nothing to read
-- Writes, made at the end: index scores raised to their task queue's real head score (or to EMPTY) and
-- heads entries set, as (score, task queue) and (task queue, entry) pairs; heads entries deleted; task
-- queues that emptied, as (now, task queue); leases, as (expiry, job). A task queue named twice in one
-- command ends with the later value, which is the later one here too.
local zq, hs, ex = {}, {}, {}
local emptied -- the task queues that emptied (heads entries deleted, tqempty): made when one does
-- The jobs taken, with (task queue, member tail) pairs in `out` until their records are read, leased and
-- put there in their place once the walk stops; `checked` of them had their record read.
local ids, out = {}, {}
local got, checked = 0, 0
-- Entries to mend (their heads entry is missing, unreadable or stale), and parked members as (job id,
-- entry) pairs for one HSET at the end: tables made only when needed, like everything off the usual path.
local todo, pk
-- The count of jobs leased before this call (the heads hash's field MATCHED), read with the first page.
local matched

-- == Reservations, continued ===========================================================================
if RV then
  -- When this pilot has c, m, t free (its running jobs ending at their estimates), and what is left then.
  local function shadow(c, m, t)
    local fc, fm, ft = cpu, mem, tmp
    if c <= fc and m <= fm and t <= ft then return now, fc - c, fm - m, ft - t end
    for i = 1, #PD, 4 do
      fc, fm, ft = fc + PD[i + 1], fm + PD[i + 2], ft + PD[i + 3]
      if c <= fc and m <= fm and t <= ft then return now + PD[i], fc - c, fm - m, ft - t end
    end
    return nil
  end
  local function hold()
    rs, ec, em, et = shadow(R.c, R.m, R.t)
    if rs then rtq, rscore = R.tq, R.score else R, rdirty = nil, true end
  end
  local text = redis.call('HGET', base .. K_RESV, queue)
  if text then
    local st, tq, id, sc, c, m, t, need, start, at, who = string.match(text,
      '^([rx]) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (.+)$')
    R = st and {st = st, tq = tq, id = id, score = tonumber(sc), c = tonumber(c), m = tonumber(m), t = tonumber(t),
                need = tonumber(need), start = tonumber(start), at = tonumber(at), pilot = who}
    local head = R and R.score and R.c and R.m and R.t and R.need and R.start and R.at
      and redis.call('HGET', heads, R.tq)
    if not head or string.match(head, '^%S+ ([^:]+)') ~= R.id then
      R, rdirty = nil, true -- unreadable, or its job is no longer its task queue's head
    elseif R.st == 'r' and now > R.start + slack then
      R.st, rdirty = 'x', true
    elseif R.st == 'r' and R.pilot == pilot then
      hold()
    end
  end
  -- The decision, once per call, on entry x (the most urgent head that fits the pilot's total, more urgent
  -- than any that fits what is free): true when this pilot now holds a reservation it did not hold before.
  reserve = function(x)
    decided = true
    local id = string.match(X[x + 3], '^%S+ ([^:]+)')
    local s = shadow(X[x + 4], X[x + 5], X[x + 6])
    if not id or not s or (left >= 0 and s - now + X[x + 7] > left) then return false end
    if R then
      local same = R.id == id and R.tq == X[x + 1]
      if same and (R.pilot == pilot or (R.st == 'r' and s >= R.start)) then return false end
      if not same and R.st == 'r' and R.score <= X[x + 2] then return false end
    end
    R = {st = 'r', tq = X[x + 1], id = id, score = X[x + 2], c = X[x + 4], m = X[x + 5], t = X[x + 6],
         need = X[x + 7], start = s, at = now, pilot = pilot}
    rdirty = true
    hold()
    return rs ~= nil
  end
  -- A job this call leased (entry x): it runs here now (for the shadow), and the reservation goes with it.
  lend = function(x, id)
    if R and R.tq == X[x + 1] and R.id == id then R, rdirty, rs = nil, true, nil end
    local d, i = X[x + 7], #PD + 1
    while i > 1 and PD[i - 4] > d do i = i - 4 end
    table.insert(PD, i, X[x + 6]) table.insert(PD, i, X[x + 5]) table.insert(PD, i, X[x + 4])
    table.insert(PD, i, d)
    if rs then hold() end
  end
end
-- == end of reservations ==================================================================================

repeat
while got < want do
  -- Below the floor nothing fits what is free. A pilot that runs jobs walks on while a reservation may be
  -- due (see "Reservations"): until the call has decided it, if some head may fit the pilot's total.
  if f1 and ((left >= 0 and left < f4) or (cpu < f1 or mem < f2 or tmp < f3)
      and (not PD or #PD == 0 or decided or tc < f1 or tm < f2 or tt < f3)) then break end
  -- The entry of the most urgent head that fits what is free (ties go to the smaller task-queue id, as
  -- ZRANGE orders equal scores), reading pages until no entry left unread can beat it.
  local b
  -- (with a policy, each group's pages have their own size: GS)
  local size = want - got + 2
  while true do
    if todo then
      -- Entries read from their task queue's zset: its head, if it can be read, becomes the entry (with a
      -- floor that is never wrong, and its index score); a member that cannot be read is parked.
      for _, x in ipairs(todo) do
        local tq = X[x + 1]
        local key = base .. K_TQ .. tq
        X[x + 2], X[x + 3], X[x + 4], X[x + 5], X[x + 6], X[x + 7] = EMPTY, false, false, false, false, false
        while true do
          local head = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
          if #head == 0 then
            zq[#zq + 1] = EMPTY_TEXT zq[#zq + 1] = tq
            emptied = emptied or {}
            emptied[#emptied + 1] = tq
            break
          end
          if string.match(head[1], '^[^:%s]+:%d+:%d+:%d+:%d+$') then
            local entry = head[2] .. ' ' .. head[1] .. ' 0:0:0:0'
            X[x + 2], X[x + 3] = tonumber(head[2]), entry
            hs[#hs + 1] = tq hs[#hs + 1] = entry
            zq[#zq + 1] = head[2] zq[#zq + 1] = tq
            break
          end
          pk = pk or {}
          pk[#pk + 1] = string.match(head[1], '^([^:]+):') or head[1]
          pk[#pk + 1] = cjson.encode({why = 'its task-queue member cannot be read', t = tq, m = head[1], at = now})
          redis.call('ZREM', key, head[1])
        end
      end
      todo = nil
    end
    b = nil
    local h -- reservations: the most urgent head that fits the pilot's total
    if not FS then
      -- The pass without a policy: an entry is read only if it can beat the best so far; one that fits
      -- what is free (and the reservation held, if any) is a candidate, and one that does not is weighed
      -- for a reservation only if it fits the pilot's total. The first candidate in order is b; a head
      -- weighed for h that is a candidate could only be b itself (never before b: no reservation), so h
      -- is looked for among the others alone, and a call with no wide head pays one test per such entry.
      for x = 0, 7 * (n - 1), 7 do
        local r = X[x + 2]
        if r < EMPTY and (not b or r <= X[b + 2]) then
          local c = X[x + 4]
          if not c then
            local c1, m1, t1, e1 = string.match(X[x + 3], '^%S+ [^:]+:(%d+):(%d+):(%d+):(%d+) ')
            if c1 then c, m1, t1, e1 = c1 + 0, m1 + 0, t1 + 0, e1 + 0 end
            if not (c and m1 and t1 and e1) then
              todo = {x} -- an entry that cannot be read: mended, and the pass made again
              break
            end
            X[x + 4], X[x + 5], X[x + 6], X[x + 7] = c, m1, t1, e1
          end
          if c <= cpu and X[x + 5] <= mem and X[x + 6] <= tmp and (left < 0 or X[x + 7] <= left)
              and (not rs or r < rscore or (r == rscore and X[x + 1] <= rtq) or now + X[x + 7] <= rs
                   or RB and r - X[x + 7] < rs -- bounded (issue 29): due before the reserved start, less its run
                   or (c <= ec and X[x + 5] <= em and X[x + 6] <= et)) then -- backfill (reservations)
            if not b or r < X[b + 2] or X[x + 1] < X[b + 1] then b = x end
          elseif RV and not decided and c <= tc and X[x + 5] <= tm and X[x + 6] <= tt -- fits the total
              and (not h or r < X[h + 2] or (r == X[h + 2] and X[x + 1] < X[h + 1])) then
            h = x
          end
        end
      end
    else
      -- The pass with a policy (fair share): in the policy's order; as without one, an entry is read only if
      -- it goes before the best so far (b, or h for reservations).
      -- (fs_order in line: the ranks of b and h kept beside them, an entry's from its group's state)
      local b1, b2, h1, h2
      local hw = RV and not decided
      for x = 0, 7 * (n - 1), 7 do
        local r = X[x + 2]
        if r < EMPTY then
          local sx = XS[x]
          local x1 = sx.rank or fs_grank(sx)
          local x2 = sx.owners and fs_orank(X[x + 1], sx) or 0
          local vb = not b or x1 < b1 or x1 == b1 and (x2 < b2 or x2 == b2
            and (r < X[b + 2] or r == X[b + 2] and X[x + 1] < X[b + 1]))
          local vh = hw and (not h or x1 < h1 or x1 == h1 and (x2 < h2 or x2 == h2
            and (r < X[h + 2] or r == X[h + 2] and X[x + 1] < X[h + 1])))
          if vb or vh then
            local c = X[x + 4]
            if not c then
              local c1, m1, t1, e1 = string.match(X[x + 3], '^%S+ [^:]+:(%d+):(%d+):(%d+):(%d+) ')
              if c1 then c, m1, t1, e1 = c1 + 0, m1 + 0, t1 + 0, e1 + 0 end
              if not (c and m1 and t1 and e1) then
                todo = {x} -- an entry that cannot be read: mended, and the pass made again
                break
              end
              X[x + 4], X[x + 5], X[x + 6], X[x + 7] = c, m1, t1, e1
            end
            if vb and c <= cpu and X[x + 5] <= mem and X[x + 6] <= tmp and (left < 0 or X[x + 7] <= left)
                and fs_allowed(X, x)
                and (not rs or r < rscore or (r == rscore and X[x + 1] <= rtq) or now + X[x + 7] <= rs
                     or RB and r - X[x + 7] < rs -- bounded (issue 29): due before the reserved start, less its run
                     or (c <= ec and X[x + 5] <= em and X[x + 6] <= et)) then -- backfill (reservations)
              b, b1, b2 = x, x1, x2
            end
            if vh and c <= tc and X[x + 5] <= tm and X[x + 6] <= tt -- fits the pilot's total
                and fs_allowed(X, x) then -- the first in order (reservations)
              h, h1, h2 = x, x1, x2
            end
          end
        end
      end
    end
    if todo then
      b = nil
    elseif RV and not decided and h and (all or FS and fs_final(X, h) or not FS and X[h + 2] < bound)
        and (not b or (FS and fs_order(X, h, b)) or not FS and (X[h + 2] < X[b + 2]
             or (X[h + 2] == X[b + 2] and X[h + 1] < X[b + 1]))) and reserve(h) then
      b = nil -- this pilot now holds cores for h: the pass again, under the reservation
    elseif decided and not b and f1 and (cpu < f1 or mem < f2 or tmp < f3) then
      break -- decided, and below the floor: no page left can bring a head that fits what is free
    elseif b and (all or FS and fs_final(X, b) or not FS and X[b + 2] < bound) then
      break
    elseif all then
      -- Nothing fits, and every non-empty task queue of the index was read: the queue's floor is theirs.
      b = nil
      local o1, o2, o3, o4 = f1, f2, f3, f4
      f1, f2, f3, f4 = EMPTY, EMPTY, EMPTY, EMPTY
      for x = 0, 7 * (n - 1), 7 do
        if X[x + 2] < EMPTY then
          local g1, g2, g3, g4 = string.match(X[x + 3], '^%S+ %S+ (%d+):(%d+):(%d+):(%d+)$')
          if g1 then
            g1, g2, g3, g4 = g1 + 0, g2 + 0, g3 + 0, g4 + 0
          else
            g1, g2, g3, g4 = string.match(X[x + 3], '^%S+ %S+ ([^:]+):([^:]+):([^:]+):([^:]+)$')
            if g1 then g1, g2, g3, g4 = tonumber(g1), tonumber(g2), tonumber(g3), tonumber(g4) end
          end
          if not (g1 and g2 and g3 and g4) then g1, g2, g3, g4 = 0, 0, 0, 0 end -- unreadable: 0, never wrong
          if g1 < f1 then f1 = g1 end
          if g2 < f2 then f2 = g2 end
          if g3 < f3 then f3 = g3 end
          if g4 < f4 then f4 = g4 end
        end
      end
      -- Formatted (four %.17g: 2% of a filling call) only when it changed.
      if not (f1 == o1 and f2 == o2 and f3 == o3 and f4 == o4) then
        local text = string.format('%.17g:%.17g:%.17g:%.17g', f1, f2, f3, f4)
        if text ~= floor_text then redis.call('HSET', qfloor, queue, text) floor_text = text end
        if FS then FS.floor = f1 end -- the groups are shut against the floor as it is now (fs_final)
      end
      break
    else
      b = nil
      -- The next page of the index (entries below EMPTY only), and the heads of its task queues in one
      -- HMGET. An entry without a heads entry (its task queue emptied through another queue, or its members
      -- predate the heads hash), or with one that cannot be read, is mended from its zset at the top of the
      -- next pass. Of a full page only the last index score is read (Redis formats every score it replies
      -- with): it bounds the entries not read yet, and an entry whose real score is past it has a stale
      -- index score, raised so that later walks find it in its place. A page that is not full ends the
      -- index: no bound is needed, and every walk reads all of it anyway.
      -- With a policy, the page is of one group's index (fs_next: the one whose unread entries may go first),
      -- and `all` says, until the end of this branch, that that group has none left.
      local st, key, from = nil, qh, n
      if FS then
        st = fs_next()
        if not st then break end -- every group read or shut: nothing fits (b is nil: see fs_final)
        key, from, size = st.key, st.n, st.size
      end
      local page = redis.call('ZRANGEBYSCORE', key, '-inf', '(1e18', 'LIMIT', from, size)
      local k = #page
      if k < size then all = true end
      if k > 0 then
        local x0 = 7 * n
        if st then for i = 0, k - 1 do XS[x0 + 7 * i] = st end end
        local last = all and EMPTY or redis.call('ZSCORE', key, page[k]) + 0 -- Redis's own number
        -- The first page reads the count of jobs leased too (the heads hash's field MATCHED, see the end), in
        -- front of the page's heads (o = 1: the page's table stays as Redis made it).
        local o = n == 0 and 1 or 0
        local entries
        if o == 1 then entries = redis.call('HMGET', heads, MATCHED, unpack(page))
        else entries = redis.call('HMGET', heads, unpack(page)) end
        -- The scores by arithmetic in a pcall (one strtod each, where tonumber makes two: a 17-digit score
        -- costs more than a Redis command's dispatch); an entry that is not a number fails it, and the page's
        -- scores (and the count) are read again with tonumber, which tells such an entry apart.
        local read, count = pcall(scores, X, entries, x0, k, o)
        if o == 1 then matched = read and count or tonumber(entries[1]) or 0 end
        for i = 1, k do
          local x, tq, entry = x0 + 7 * (i - 1), page[i], entries[i + o]
          local r = read and X[x + 2]
          if not read then
            local text = entry and string.match(entry, '^%S+')
            r = text and tonumber(text)
          end
          X[x + 1], X[x + 4], X[x + 5], X[x + 6], X[x + 7] = tq, false, false, false, false
          if r then
            X[x + 2], X[x + 3] = r, entry
            if r > last then zq[#zq + 1] = string.match(entry, '^%S+') zq[#zq + 1] = tq end
          else
            X[x + 2], X[x + 3] = EMPTY, false
            todo = todo or {}
            todo[#todo + 1] = x
          end
        end
        n = n + k
        bound = last
        size = size * 2
      end
      if st then
        st.n, st.bound, st.size, st.all = st.n + k, bound, size, all
        for _, o in ipairs(GS) do all = all and o.all end
      end
    end
  end
  if not b then break end
  -- Lease the head of entry b: take it out of its task queue, whose next head replaces it in entry b. A
  -- head the task queue no longer holds (a stale heads entry) is mended instead, and the walk made again.
  local tq = X[b + 1]
  local key = base .. K_TQ .. tq
  local id, tail, fl = string.match(X[b + 3], '^%S+ ([^:]+)(:%S+) (%S+)$')
  local member = id and id .. tail
  if not id or redis.call('ZREM', key, member) == 0 then
    todo = {b}
  else
    if FS then fs_take(tq, X[b + 4], 1) end
    if cc then
      rc, rm, rt = rc - X[b + 4], rm - X[b + 5], rt - X[b + 6]
      cpu, mem, tmp = math.min(rc, cc), math.min(rm, cm), math.min(rt, ct)
    else
      cpu, mem, tmp = cpu - X[b + 4], mem - X[b + 5], tmp - X[b + 6]
    end
    if RV then lend(b, id) end -- reservations: before entry b becomes the next head
    local head = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    if #head == 0 then
      X[b + 2] = EMPTY
      zq[#zq + 1] = EMPTY_TEXT zq[#zq + 1] = tq
      emptied = emptied or {}
      emptied[#emptied + 1] = tq
    else
      local entry = head[2] .. ' ' .. head[1] .. ' ' .. fl
      X[b + 2], X[b + 3], X[b + 4] = head[2] + 0, entry, false -- Redis's own number
      zq[#zq + 1] = head[2] zq[#zq + 1] = tq
      hs[#hs + 1] = tq hs[#hs + 1] = entry
    end
    if not lease then
      -- As cjson writes them (it escapes '"', '\\', '/' and control characters; numbers as %.14g), without
      -- its encoder for a pilot id that needs no escape.
      local pl = string.find(pilot, '[%c"\\/\127-\255]') and cjson.encode(pilot) or '"' .. pilot .. '"'
      lease = ',"pl":' .. pl .. (FS and ',"fq":' .. cjson.encode(queue) or '') .. ',"tm":'
        .. string.format('%.14g', now) .. '}'
      expiry = now + length -- a number: Redis writes it exactly (shortest round trip), no %.17g here
    end
    got = got + 1
    ids[got], out[2 * got - 1], out[2 * got] = id, tq, tail
  end
end
-- The records of the jobs just taken, leased; a job whose record cannot be is parked, what it took is
-- free again, and the walk goes on.
local parked = false
if got > checked then
  local raws = redis.call('HMGET', jobs, unpack(ids, checked + 1, got))
  local kept = checked
  for i = checked + 1, got do
    local id, tq, tail = ids[i], out[2 * i - 1], out[2 * i]
    local text, why = leased(raws[i - checked], tail, pilot, now, lease, FS, queue)
    out[2 * i - 1], out[2 * i] = nil, nil
    if text then
      kept = kept + 1
      ids[kept], out[2 * kept - 1], out[2 * kept] = id, id, text
      ex[2 * kept - 1], ex[2 * kept] = expiry, id
    else
      pk = pk or {}
      pk[#pk + 1] = id
      pk[#pk + 1] = cjson.encode({why = why, t = tq, m = id .. tail, at = now})
      local c, m, t = string.match(tail, '^:(%d+):(%d+):(%d+):')
      if FS then fs_take(tq, tonumber(c), -1) end
      if cc then
        rc, rm, rt = rc + tonumber(c), rm + tonumber(m), rt + tonumber(t)
        cpu, mem, tmp = math.min(rc, cc), math.min(rm, cm), math.min(rt, ct)
      else
        cpu, mem, tmp = cpu + tonumber(c), mem + tonumber(m), tmp + tonumber(t)
      end
      parked = true
    end
  end
  got, checked = kept, kept
end
until not parked

if rdirty then -- reservations
  if R then
    redis.call('HSET', base .. K_RESV, queue, string.format('%s %s %s %.17g %d %d %d %d %.17g %.17g %s', R.st, R.tq,
      R.id, R.score, R.c, R.m, R.t, R.need, R.start, R.at, R.pilot))
  else
    redis.call('HDEL', base .. K_RESV, queue)
  end
end
-- The jobs leased are counted in the heads hash (its field MATCHED; taskqueues/store/stats.py), written with
-- the heads: a HINCRBY of the stats hash was 2% of a call. The first page read it: a call leases only after.
if got > 0 then hs[#hs + 1] = MATCHED hs[#hs + 1] = matched + got end
if #hs > 0 then redis.call('HSET', heads, unpack(hs)) end
if emptied then
  redis.call('HDEL', heads, unpack(emptied))
  local ze = {}
  for i, tq in ipairs(emptied) do ze[2 * i - 1], ze[2 * i] = now, tq end
  redis.call('ZADD', base .. K_TQEMPTY, 'NX', unpack(ze))
end
if #zq > 0 then
  redis.call('ZADD', qh, unpack(zq))
  if policy then fs_index(base, queue, zq) end -- the index by group, kept with the heads index (see GROUPS)
end
if pk then redis.call('HSET', base .. K_PARKED, unpack(pk)) end
if FS then fs_write() end
if got > 0 then
  redis.call('HSET', jobs, unpack(out))
  redis.call('ZADD', base .. K_LEASES, unpack(ex))
end
return out
