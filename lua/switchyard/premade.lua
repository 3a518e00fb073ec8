-- switchyard.premade: picks Go made ahead (docs/pick-protocol.md, 0x09) for
-- requests that carry none of the backend's variables (or only their canary
-- decision, for a round-robin backend: s.own), and the draws of a routed
-- backend's weight rule (with a new sticky session of the backend a draw
-- chose): double-buffered batches sized to about 40 ms of the worker's
-- eligible requests, none used after 100 ms. A sticky backend's own new
-- sessions are made in the worker (tables.new_session).
-- In: backend infos, the request's variables (only checked for absence).
-- Out: filled pick results, or false when no premade pick is at hand.

local ngx = ngx
local bit = require("bit")
local wire = require("switchyard.wire")
local byte, sub = string.byte, string.sub
local band = bit.band
local ngx_var = ngx.var
local ngx_now = ngx.now
local T = wire.T
local be32, f64 = wire.be32, wire.f64
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local tables = require("switchyard.tables")
local should_set_cookie = tables.should_set_cookie
-- PREMADE_MAX bounds the premade picks asked for at once (the protocol's
-- MaxPremade), STRIDE the candidates of one (its MaxCandidates). Batches are
-- sized like leases (conn.ask_batch) and used for at most LEASE_TTL.
local PREMADE_MAX, STRIDE = 1024, 8
local LEASE_TTL = 0.1

local _M = {}

-- bad_batch drops a premade batch that does not read as the protocol says,
-- and stops using premade picks for this info (its requests ask Go).
local function bad_batch(info, cur)
  cur.n, cur.b = 0, nil
  info.pfailed = true
  conn.log_once("premade", "a premade batch did not read as the protocol says; asking per request")
  return false
end

-- load_premade keeps a premade reply as info's reserve batch (info.pnext).
-- Its picks are read one at a time as requests take them (take), not here:
-- reading a batch of a thousand in the reader thread held the worker for
-- most of a millisecond, in the tail latency of the requests behind it.
local function load_premade(info, name, b)
  info.ppending = false
  local code, pgen = byte(b, 7), be32(b, 8)
  if code ~= 0 or pgen ~= info.gen or state.infos[name] ~= info then
    if code ~= 0 then
      info.pfailed = true
    end
    return nil
  end
  local batch = info.pnext
  if not batch then
    batch = {}
    info.pnext = batch
  end
  batch.b, batch.n, batch.i, batch.pos, batch.t = b, byte(b, 12) * 256 + byte(b, 13), 1, 14, ngx_now()
  return nil
end

-- ttl is how long a batch of info's is used: LEASE_TTL, or for ever (until
-- its info is of an old generation, which pick.lua checks first) for the
-- draws of a routed backend none of whose sides is scored: a draw of the
-- weight rule, a routing choice or a new sticky session do not go stale as
-- an ewma pick does, and dropping them made each request of a slow stream
-- wait for a fresh batch.
local function ttl(info)
  local rt = info.route
  if rt and state.tables and rt.pown ~= 4 and rt.aown ~= 4 then
    return math.huge
  end
  return LEASE_TTL
end

-- request_premade asks Go for the backend's next premade picks, about
-- 40 ms of this worker's eligible requests to it, 250 ms of draws kept
-- until their generation ends (conn.ask_batch).
local function request_premade(info, name, now)
  -- Draws used until their generation ends (ttl): a larger batch.
  local span = ttl(info) == math.huge and conn.BATCH_SPAN_KEPT or nil
  if conn.ask_batch(T.PREMADE, info, name, now, info.pdemand, info.preq_t, info.preq_demand, PREMADE_MAX, "premade", span) then
    info.ppending = true
  end
  info.preq_t, info.preq_demand = now, info.pdemand
end

-- take_premade fills s with the next of the picks Go made ahead for
-- requests to this backend that carry none of its variables, and reports
-- whether there was one. Like leases, a batch is used for at most
-- LEASE_TTL, and the next one is asked for as soon as one starts being
-- used; when none is at hand the request asks Go itself.
function _M.take(s, info, name)
  local now = ngx_now()
  info.pdemand = info.pdemand + 1
  local cur = info.pcur
  local life = ttl(info)
  if not cur or cur.i > cur.n or now - cur.t >= life then
    local nxt = info.pnext
    if cur then
      cur.n, cur.b = 0, nil
    end
    if nxt and nxt.n > 0 and now - nxt.t < life then
      info.pcur, info.pnext = nxt, cur
      cur = nxt
    else
      info.pcur = nil
      cur = nil
    end
    if not info.ppending then
      request_premade(info, name, now)
    end
    if not cur then
      return false
    end
  end
  -- The next pick of the batch: flags u8, backend str8, score f64, ncand
  -- u8, then ncand x (peer str8 [, key str8 when flags bit 1]).
  local b, i = cur.b, cur.pos
  local len = #b
  if i + 11 > len then
    return bad_batch(info, cur)
  end
  local flags, l = byte(b, i), byte(b, i + 1)
  local backend = sub(b, i + 2, i + 1 + l)
  i = i + 2 + l
  local score = nil
  -- Scores are never negative; -1 (sign bit set) is "not scored".
  if byte(b, i) < 128 then
    score = f64(b, i)
  end
  local nc = byte(b, i + 8)
  i = i + 9
  if band(flags, 4) == 4 then
    -- A routing decision only (flags bit 4, no candidates): the peers
    -- come from a lease of that backend's own rotation (pick.lua).
    if nc ~= 0 then
      return bad_batch(info, cur)
    end
    cur.pos, cur.i = i, cur.i + 1
    s.n, s.code, s.alt, s.backend, s.score, s.recipe = 0, 0, band(flags, 1) == 1, backend, nil, false
    s.own, s.recipe_src = backend, false
    return true
  end
  if not nc or nc == 0 or nc > STRIDE then
    return bad_batch(info, cur)
  end
  local keyed = band(flags, 2) == 2
  -- A new session's cookie is written from its backend's recipe: for a
  -- routed backend's draw, the chosen backend's (s.recipe_src tells
  -- pick.lua which info it came from).
  local rinfo = info
  if keyed and backend ~= name then
    rinfo = state.infos[backend]
    if rinfo and rinfo.gen ~= info.gen then
      rinfo = nil
    end
  end
  local recipe = keyed and rinfo and rinfo.recipe
  local set = recipe and should_set_cookie(recipe)
  s.recipe_src = recipe and rinfo or false
  local cands, cookies = s.cands, s.cookies
  for j = 1, nc do
    l = byte(b, i)
    if not l or i + l > len then
      return bad_batch(info, cur)
    end
    cands[j] = sub(b, i + 1, i + l)
    i = i + 1 + l
    local cookie = false
    if keyed then
      -- A sticky new session: the upstream key of this candidate's
      -- cookie. The cookie itself is written from the table's recipe
      -- only for the candidate that serves (pick.candidate).
      l = byte(b, i)
      if not l or i + l > len then
        return bad_batch(info, cur)
      end
      if set then
        cookie = sub(b, i + 1, i + l)
      end
      i = i + 1 + l
    end
    cookies[j] = cookie
  end
  cur.pos, cur.i = i, cur.i + 1
  s.n, s.code, s.alt, s.backend, s.score = nc, 0, band(flags, 1) == 1, backend, score
  -- s.cookies hold upstream keys; pick.candidate writes the cookie.
  s.recipe, s.own = set and recipe or false, false
  return true
end

-- SCAN bounds the draws take_for passes over.
local SCAN = 8

-- take_for fills s with the next of a routed backend's premade draws that
-- chose backend and carries its picks or new session (not a choice only),
-- for a request a rule sent there: draws that chose another backend are
-- passed over and dropped. Draws are independent, so dropping some leaves
-- those after them as Go made them, and the weight's share of the requests
-- that take draws unchanged. It reports false after SCAN draws without one.
function _M.take_for(s, info, name, backend)
  for _ = 1, SCAN do
    if not _M.take(s, info, name) then
      return false
    end
    if not s.own and s.backend == backend then
      return true
    end
  end
  s.own = false
  return false
end

-- vars_absent reports whether the request has none of the variables the
-- backend's picks read (premade picks are made for such requests).
function _M.vars_absent(info)
  local vars = info.vars
  for j = 1, info.nvars do
    if ngx_var[vars[j]] ~= nil then
      return false
    end
  end
  return true
end

-- take_wait is take, but when no premade pick is at hand and a batch is on
-- its way, it waits for that batch rather than reporting false.
function _M.take_wait(s, info, name)
  return conn.take_or_await(_M.take, s, info, name, "premade", "ppending")
end

conn.handlers[T.PREMADE_REPLY] = function(s, b)
  local err = load_premade(s.info, s.name, b)
  conn.arrived(s.info, "premade")
  return err
end

return _M
