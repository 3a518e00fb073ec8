-- switchyard.premade: picks Go made ahead (docs/pick-protocol.md, 0x09) for
-- requests that carry none of the backend's variables, and new sticky
-- sessions: double-buffered batches sized to about 40 ms of the worker's
-- eligible requests, none used after 100 ms.
-- In: backend infos, the request's variables (only checked for absence).
-- Out: filled pick results, or false when no premade pick is at hand.

local ngx = ngx
local bit = require("bit")
local wire = require("switchyard.wire")
local byte, sub = string.byte, string.sub
local band = bit.band
local ngx_var = ngx.var
local ngx_now = ngx.now
local T, NO_SCORE = wire.T, wire.NO_SCORE
local be32, f64 = wire.be32, wire.f64
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local tables = require("switchyard.tables")
local should_set_cookie, sticky_cookie = tables.should_set_cookie, tables.sticky_cookie
-- PREMADE_MAX bounds the premade picks asked for at once (the protocol's
-- MaxPremade); STRIDE is the room for each premade pick's candidates in the
-- flat candidate array (the protocol's MaxCandidates). Batches are sized
-- and aged like leases (switchyard.lease).
local PREMADE_MAX, STRIDE = 1024, 8
local LEASE_TTL = 0.1

local _M = {}

-- load_premade stores a premade reply's picks in info's reserve batch
-- (info.pnext), flat: per pick whether it went to the canary, its backend,
-- its score, and its candidates at (k-1)*STRIDE+1 ... Batches are reused.
local function load_premade(info, name, b)
  info.ppending = false
  local code, pgen = byte(b, 7), be32(b, 8)
  if code ~= 0 or pgen ~= info.gen or state.infos[name] ~= info then
    if code ~= 0 then
      info.pfailed = true
    end
    return nil
  end
  local n = byte(b, 12) * 256 + byte(b, 13)
  local batch = info.pnext
  if not batch then
    batch = { n = 0, i = 1, t = 0, alt = {}, backend = {}, score = {}, nc = {}, c = {}, keys = {} }
    info.pnext = batch
  end
  local alt, backend, score, ncs, c, keys = batch.alt, batch.backend, batch.score, batch.nc, batch.c, batch.keys
  local i, len = 14, #b
  for k = 1, n do
    if i + 11 > len then
      return "bad premade frame"
    end
    local flags = byte(b, i)
    alt[k] = band(flags, 1) == 1
    local keyed = band(flags, 2) == 2
    local l = byte(b, i + 1)
    backend[k] = sub(b, i + 2, i + 1 + l)
    i = i + 2 + l
    if sub(b, i, i + 7) == NO_SCORE then
      score[k] = false
    else
      score[k] = f64(b, i)
    end
    local nc = byte(b, i + 8)
    i = i + 9
    if nc == 0 or nc > STRIDE then
      return "bad premade candidates"
    end
    ncs[k] = nc
    local base = (k - 1) * STRIDE
    for j = 1, nc do
      l = byte(b, i)
      c[base + j] = sub(b, i + 1, i + l)
      i = i + 1 + l
      if keyed then
        -- A sticky new session: the upstream key of this candidate's
        -- cookie, which the shim writes (sticky_cookie).
        l = byte(b, i)
        keys[base + j] = sub(b, i + 1, i + l)
        i = i + 1 + l
      else
        keys[base + j] = false
      end
    end
  end
  if i ~= len + 1 then
    return "bad premade frame"
  end
  batch.n, batch.i, batch.t = n, 1, ngx_now()
  return nil
end

-- request_premade asks Go for the backend's next premade picks, about
-- 40 ms of this worker's eligible requests to it (conn.ask_batch).
local function request_premade(info, name, now)
  if conn.ask_batch(T.PREMADE, info, name, now, info.pdemand, info.preq_t, info.preq_demand, PREMADE_MAX, "premade") then
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
  if not cur or cur.i > cur.n or now - cur.t >= LEASE_TTL then
    local nxt = info.pnext
    if cur then
      cur.n = 0
    end
    if nxt and nxt.n > 0 and now - nxt.t < LEASE_TTL then
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
  local k = cur.i
  cur.i = k + 1
  local nc, base, c, keys = cur.nc[k], (k - 1) * STRIDE, cur.c, cur.keys
  local cands, cookies = s.cands, s.cookies
  local recipe = keys[base + 1] and info.recipe
  local set = recipe and should_set_cookie(recipe)
  for j = 1, nc do
    local key = keys[base + j]
    cands[j] = c[base + j]
    cookies[j] = set and key and sticky_cookie(recipe, key) or false
  end
  s.n, s.code, s.alt, s.backend = nc, 0, cur.alt[k], cur.backend[k]
  s.score = cur.score[k] or nil
  return true
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

conn.handlers[T.PREMADE_REPLY] = function(s, b)
  return load_premade(s.info, s.name, b)
end

return _M
