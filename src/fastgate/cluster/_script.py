"""The one Lua script every worker runs to refresh its lease (atomic inside Redis).

KEYS: 1 the workers' records (hash: worker id -> JSON), 2 their lease expiries (sorted set:
worker id -> Redis time in ms), 3 the namespace's epoch (a hash: ``id``, ``grace_until``,
``run``: the run_id of the Redis process that last ran the script).
ARGV: 1 worker id, 2 lease ttl (ms), 3 the worker's report (JSON), 4 ``refresh``, ``drain``
(a closed worker whose calls still run: it is granted nothing and holds what it runs) or
``leave``, 5 the namespace's rebalancing channel (a worker short of its share, or one that gave
some back, publishes its id there; the others refresh early).

A namespace another client wrote into is refused, nothing granted: the reply is then
``{"err": "wrong_type", "key", "type", "want"}`` for a key of another type, or
``{"err": "bad_record", "key", "field"}`` for a field of the workers' hash that is no record of
this script's (not JSON, a count missing or below zero).

The report: ``lim`` this worker's limits, ``dem`` its demand (queued + running per session, kind
and pool), ``use`` what it runs now, ``app`` the allotment it enforces now (empty when its lease
has lapsed), ``ep``/``left`` the epoch of that allotment and how many ms it still runs.

Per dimension (global ``g``, each session ``s``, kind ``k``, pool ``p``) Redis keeps a worker's
``held``: what that worker may be running until its next refresh (the larger of its grant, the
allotment it still enforces and what it runs). A pool limit any worker declares holds for all:
a record's ``ack`` names the pools its worker enforces a limit on until its next refresh, and a
worker that may be admitting in a pool without one counts as holding all of that pool. Every
grant fits in the limit minus what the other live workers hold, so the limit holds however the
workers' refreshes interleave. Targets are max-min fair: a limit is water-filled over the
sessions' cluster-wide demand, and each session's share over the workers where it waits; what no
demand takes is spread evenly, so a burst is admitted locally without a round trip. Time is
Redis's (``TIME``), never a client's; a record keeps its worker's ttl, and no lease end is left
later than that from now (Redis's clock went back). Another Redis process than the epoch's
(``INFO``'s run_id), or a worker whose unexpired lease Redis has no record of, starts a new
epoch: the records may be older than what the workers enforce.
"""

from __future__ import annotations

REFRESH_LUA = r"""
local workers_key, leases_key, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local me, ttl = ARGV[1], tonumber(ARGV[2])

-- A worker's record as this script writes it: counts that are numbers, none below zero.
local function count(v) return type(v) == 'number' and v >= 0 and v < math.huge end
local function counts(v)
  if type(v) ~= 'table' then return false end
  for _, x in pairs(v) do if not count(x) then return false end end
  return true
end
local function record(raw)
  local ok, r = pcall(cjson.decode, raw)
  if not ok or type(r) ~= 'table' then return nil end
  local lim, held = r.lim, r.held
  if type(lim) ~= 'table' or type(held) ~= 'table' or type(r.dem) ~= 'table' then return nil end
  if not (count(lim.g) and count(lim.s) and counts(lim.k) and counts(lim.p)) then return nil end
  if not (count(held.g) and counts(held.s) and counts(held.k) and counts(held.p)) then
    return nil
  end
  return r
end

-- The pools a worker enforces a limit on from its report until its next one: before the reply
-- those of the allotment it runs now (``app``; none: it admits nothing), after it those of the
-- limits ``L`` (all of them, with its share), and its own throughout.
local function enforced(rep, L)
  local ack = {}
  local before = nil
  if type(rep.app) == 'table' and type(rep.app.p) == 'table' then before = rep.app.p end
  local own = (type(rep.lim) == 'table' and type(rep.lim.p) == 'table') and rep.lim.p or {}
  for name, _ in pairs(L.p) do
    if rep.app == nil or (before ~= nil and before[name] ~= nil) or own[name] ~= nil then
      ack[name] = true
    end
  end
  return ack
end

local function run()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Lapsed leases first: their holders stopped admitting on their own clocks before this.
local lapsed = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now)
if #lapsed > 0 then
  redis.call('HDEL', workers_key, unpack(lapsed))
  redis.call('ZREMRANGEBYSCORE', leases_key, '-inf', now)
end
if ARGV[4] == 'leave' then
  redis.call('HDEL', workers_key, me)
  redis.call('ZREM', leases_key, me)
  return '{}'
end

-- The epoch names this namespace's state; a worker that held an allotment of another epoch
-- means Redis lost its records (a restart): until what that worker (and any other like it)
-- may still be running is known, nobody's grant grows beyond what it already enforces.
local rep = cjson.decode(ARGV[3])
-- The Redis process answering (its run_id): another one means a restart or a failover, and
-- records loaded from a snapshot (or a replica) may be older than what the workers enforce.
-- Where INFO is refused (an ACL, a proxy) the check is skipped.
local run = nil
local info_ok, info = pcall(redis.call, 'INFO', 'server')
if info_ok and type(info) == 'string' then run = string.match(info, 'run_id:(%x+)') end
local epoch = redis.call('HGET', epoch_key, 'id')
local new_run = run ~= nil and redis.call('HGET', epoch_key, 'run') ~= run
local stale = false
if epoch then
  if new_run then stale = true end
  -- This worker still runs a lease of this state, and Redis has no record of it: Redis's
  -- clock jumped past the lease, or its records went back in time.
  if rep.ep == epoch and (tonumber(rep.left) or 0) > 0
    and redis.call('HEXISTS', workers_key, me) == 0 then
    stale = true
  end
end
if not epoch or stale then
  -- A new epoch: every worker that holds an allotment of the old one reports it as a lease of
  -- lost state (below), so no grant grows until what they may run is known.
  epoch = now .. '-' .. me .. '-' .. redis.call('HINCRBY', epoch_key, 'n', 1)
  redis.call('HSET', epoch_key, 'id', epoch)
  if not stale then redis.call('HSET', epoch_key, 'grace_until', 0) end
end
if new_run then redis.call('HSET', epoch_key, 'run', run) end
local grace_until = tonumber(redis.call('HGET', epoch_key, 'grace_until')) or 0
if stale and new_run and grace_until < now + ttl then
  -- Another Redis process with records of its own: the old leases may run for up to a lease
  -- from now, and a worker without a lease (this one, maybe) cannot say how long.
  grace_until = now + ttl
  redis.call('HSET', epoch_key, 'grace_until', grace_until)
end
if rep.ep and rep.ep ~= epoch then
  -- Its lease may still run (``left``), and workers admitting their fallback share meanwhile
  -- report within a refresh interval (``ri``): until then no grant grows.
  local until_ms = now + math.max(tonumber(rep.left) or 0, tonumber(rep.ri) or 0)
  if until_ms > grace_until then
    grace_until = until_ms
    redis.call('HSET', epoch_key, 'grace_until', grace_until)
  end
end
local grace = now < grace_until

local function num(v) return tonumber(v) or 0 end
local function map(v) if type(v) == 'table' then return v end return {} end
local function list3(v)
  v = map(v)
  return {num(v[1]), num(v[2]), num(v[3])}
end
local function dims(v)
  v = map(v)
  return {g = num(v.g), s = map(v.s), k = list3(v.k), p = map(v.p)}
end

local recs = {}
local ids = {}
local before = nil
local raw = redis.call('HGETALL', workers_key)
for i = 1, #raw, 2 do
  local r = record(raw[i + 1])
  if r == nil then
    -- Another client wrote here: what it holds is unknown, so nobody's grant can be computed.
    return cjson.encode({err = 'bad_record', key = workers_key, field = raw[i]})
  end
  if raw[i] ~= me then
    recs[raw[i]] = r
    ids[#ids + 1] = raw[i]
  else
    before = r.held
  end
end
-- No lease ends later than its worker's ttl from now: a later end means Redis's clock went
-- back, and a worker that died would otherwise keep its share for as long as the jump.
local ends = redis.call('ZRANGE', leases_key, 0, -1, 'WITHSCORES')
for i = 1, #ends, 2 do
  local r = recs[ends[i]]
  local most = r and tonumber(r.ttl)
  if most and tonumber(ends[i + 1]) > now + most then
    redis.call('ZADD', leases_key, now + most, ends[i])
  end
end
local mine = {lim = rep.lim, dem = rep.dem, ttl = ttl}
recs[me] = mine
ids[#ids + 1] = me
table.sort(ids)

-- Effective limits: the smallest any live worker was configured with (safe when they differ).
local L = {g = nil, s = nil, k = {nil, nil, nil}, p = {}}
for _, id in ipairs(ids) do
  local lim = recs[id].lim
  if L.g == nil or lim.g < L.g then L.g = lim.g end
  if L.s == nil or lim.s < L.s then L.s = lim.s end
  for k = 1, 3 do
    local v = num(map(lim.k)[k])
    if L.k[k] == nil or v < L.k[k] then L.k[k] = v end
  end
  for name, v in pairs(map(lim.p)) do
    if L.p[name] == nil or v < L.p[name] then L.p[name] = v end
  end
end

-- Water-filling: capacity split max-min over demand; ties broken by id, so every worker
-- computes the same targets. Returns the shares and what is left over.
local function waterfill(keys, demand, capacity)
  local order = {}
  for i, key in ipairs(keys) do order[i] = key end
  table.sort(order, function(a, b)
    if demand[a] ~= demand[b] then return demand[a] < demand[b] end
    return a < b
  end)
  local share, left, n = {}, capacity, #order
  for i, key in ipairs(order) do
    local x = math.min(demand[key], math.floor(left / (n - i + 1)))
    if x < 0 then x = 0 end
    share[key] = x
    left = left - x
  end
  return share, left
end
-- Spread ``amount`` evenly over ``keys`` (sorted), the first ones getting the remainder.
local function even(keys, amount)
  local out, n = {}, #keys
  for i, key in ipairs(keys) do
    out[key] = math.floor(amount / n) + ((i <= amount % n) and 1 or 0)
  end
  return out
end

local draining = ARGV[4] == 'drain'
local target = {g = 0, s = {}, k = {0, 0, 0}, p = {}}
-- Sessions: each one's cluster-wide demand, then the global limit water-filled over sessions.
local sdemand, hosts, snames = {}, {}, {}
for _, id in ipairs(ids) do
  for sid, d in pairs(map(map(recs[id].dem).s)) do
    if hosts[sid] == nil then
      hosts[sid] = {}
      sdemand[sid] = 0
      snames[#snames + 1] = sid
    end
    hosts[sid][#hosts[sid] + 1] = id
    sdemand[sid] = sdemand[sid] + math.min(num(d), L.s)
  end
end
table.sort(snames)
for _, sid in ipairs(snames) do
  sdemand[sid] = math.min(sdemand[sid], L.s)
end
local sshare, gleft = waterfill(snames, sdemand, L.g)
local gfair = {}
for _, id in ipairs(ids) do gfair[id] = 0 end
for _, sid in ipairs(snames) do
  local hs = hosts[sid]
  table.sort(hs)
  local wd = {}
  for _, id in ipairs(hs) do wd[id] = math.min(num(recs[id].dem.s[sid]), L.s) end
  local split, left = waterfill(hs, wd, sshare[sid])
  -- The session's unused room goes to its hosts: a burst there needs no round trip.
  local spare = even(hs, L.s - sshare[sid] + left)
  for _, id in ipairs(hs) do gfair[id] = gfair[id] + split[id] end
  if split[me] ~= nil and not draining then
    target.s[sid] = split[me] + spare[me]
  end
end
if not draining then target.g = gfair[me] + even(ids, gleft)[me] end
-- Kinds and pools: water-filled over the workers' demand, the rest spread evenly. A worker's
-- demand counts up to its fair global share: it could not run more at once, and so a kind
-- shared by many sessions follows the sessions' max-min split, not an equal split per worker.
for k = 1, 3 do
  local wd = {}
  for _, id in ipairs(ids) do
    wd[id] = math.min(num(list3(map(recs[id].dem).k)[k]), L.k[k], gfair[id])
  end
  local share, left = waterfill(ids, wd, L.k[k])
  if not draining then target.k[k] = share[me] + even(ids, left)[me] end
end
for name, limit in pairs(L.p) do
  local wd = {}
  for _, id in ipairs(ids) do
    wd[id] = math.min(num(map(map(recs[id].dem).p)[name]), limit, gfair[id])
  end
  local share, left = waterfill(ids, wd, limit)
  if not draining then target.p[name] = share[me] + even(ids, left)[me] end
end

-- What the others hold, per dimension.
local others = {g = 0, s = {}, k = {0, 0, 0}, p = {}}
for _, id in ipairs(ids) do
  if id ~= me then
    local h = dims(recs[id].held)
    others.g = others.g + h.g
    for sid, v in pairs(h.s) do others.s[sid] = num(others.s[sid]) + num(v) end
    for k = 1, 3 do others.k[k] = others.k[k] + h.k[k] end
    local ack = map(recs[id].ack)
    for name, limit in pairs(L.p) do
      -- A worker that may admit in this pool without a limit holds all of it.
      local v = ack[name] and num(h.p[name]) or limit
      others.p[name] = num(others.p[name]) + v
    end
  end
end

local app, use = dims(rep.app), dims(rep.use)
local short = false
local function grant(want, limit, taken, applied, used)
  local g = math.min(want, limit - taken)
  if grace then g = math.min(g, applied) end
  if g < 0 then g = 0 end
  if g < want then short = true end
  return g, math.max(g, applied, used)
end
local out = {g = 0, s = {}, k = {0, 0, 0}, p = {}}
local held = {g = 0, s = {}, k = {0, 0, 0}, p = {}}
out.g, held.g = grant(target.g, L.g, others.g, app.g, use.g)
local sids = {}
for sid, _ in pairs(target.s) do sids[sid] = true end
for sid, _ in pairs(app.s) do sids[sid] = true end
for sid, _ in pairs(use.s) do sids[sid] = true end
for sid, _ in pairs(sids) do
  local g, h = grant(num(target.s[sid]), L.s, num(others.s[sid]), num(app.s[sid]), num(use.s[sid]))
  if g > 0 then out.s[sid] = g end
  if h > 0 then held.s[sid] = h end
end
for k = 1, 3 do
  out.k[k], held.k[k] = grant(target.k[k], L.k[k], others.k[k], app.k[k], use.k[k])
end
for name, limit in pairs(L.p) do
  out.p[name], held.p[name] = grant(
    num(target.p[name]), limit, num(others.p[name]), num(app.p[name]), num(use.p[name]))
end

mine.held = held
mine.ack = enforced(rep, L)
-- Rebalancing: when this worker is short of its fair share, or gave some back, the others
-- hear it now (and refresh) instead of at their next interval.
local gave_back = false
if before ~= nil then
  local b = dims(before)
  if held.g < b.g then gave_back = true end
  for k = 1, 3 do if held.k[k] < b.k[k] then gave_back = true end end
  for sid, v in pairs(b.s) do if num(held.s[sid]) < num(v) then gave_back = true end end
  for name, v in pairs(b.p) do if num(held.p[name]) < num(v) then gave_back = true end end
end
if short or gave_back then
  redis.call('PUBLISH', ARGV[5], me)
end
redis.call('HSET', workers_key, me, cjson.encode(mine))
redis.call('ZADD', leases_key, now + ttl, me)
-- An abandoned namespace cleans itself up.
redis.call('PEXPIRE', workers_key, 2 * ttl)
redis.call('PEXPIRE', leases_key, 2 * ttl)
out.lim = {g = L.g, s = L.s, k = L.k, p = L.p}
out.workers = #ids
out.epoch = epoch
out.grace = grace
out.short = short
out.now = now
return cjson.encode(out)
end

local ok, res = pcall(run)
if ok then return res end
-- A key another client gave another type (WRONGTYPE above) is named in the reply.
for _, key in ipairs(KEYS) do
  local want = (key == leases_key) and 'zset' or 'hash'
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= want then
    return cjson.encode({err = 'wrong_type', key = key, type = kind, want = want})
  end
end
error(res, 0)
"""
