-- floor_policy (benchmark only, scripts/count_match.py rows "fill+f"): what no match with a shares policy can
-- do without, called after a policy-free match: the group states read (one HMGET of the fair hash: the
-- group's decayed usage and running cores, its cores at the pilot's site and queue, and its owner's), the
-- decayed usage of the group and its owner brought up to now, the counters one lease changes written (one HSET,
-- in the form match.lua writes them) and the leased task queue's index score written to its group's index (one
-- ZADD: the index by group). The policy itself comes with the floor's read (the qfloor mark): no command.
-- KEYS none (benchmark only: the keys are built from the base, as match.lua does)
-- ARGV[1] key base   ARGV[2] the pilot's queue   ARGV[3] now   ARGV[4] group   ARGV[5] owner
-- ARGV[6] cores leased   ARGV[7] task queue   ARGV[8] its index score
local base, queue, now, g, go, c = ARGV[1], ARGV[2], ARGV[3] + 0, ARGV[4], ARGV[4] .. '.' .. ARGV[5], ARGV[6] + 0
local fair = base .. K_FAIR
local site = string.match(queue, '^([^/]+)/') or queue
local ug, rg, uo, ro = 'u:' .. g, 'r:' .. g, 'u:' .. go, 'r:' .. go
local cs, cq = 'c:' .. g .. '@' .. site, 'c:' .. g .. '@' .. queue
local v = redis.call('HMGET', fair, ug, rg, cs, cq, uo, ro)
local tau = 21600 / math.log(2)
local function decayed(text, r)
  local u, t = string.match(text or '', '^(%S+) (%S+)$')
  u, t = tonumber(u) or 0, tonumber(t) or now
  local k = math.exp(-math.max(now - t, 0) / tau)
  return u * k + r * tau * (1 - k)
end
local r1, r2 = tonumber(v[2]) or 0, tonumber(v[6]) or 0
redis.call('HSET', fair, ug, string.format('%.17g %s', decayed(v[1], r1), ARGV[3]), rg, r1 + c,
  uo, string.format('%.17g %s', decayed(v[5], r2), ARGV[3]), ro, r2 + c,
  cs, (tonumber(v[3]) or 0) + c, cq, (tonumber(v[4]) or 0) + c)
redis.call('ZADD', base .. K_GH .. queue .. ':' .. g, ARGV[8], ARGV[7])
return 1
