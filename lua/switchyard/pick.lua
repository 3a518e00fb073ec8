-- switchyard.pick: the shim's entry point for one nginx worker's requests
-- (docs/pick-protocol.md). Go makes every choice: a request is decided
-- either from decision data Go sent (a round-robin lease, a chash,
-- chashsubset or sticky table, a premade pick) or by asking Go over the
-- pick socket and waiting; when Go cannot answer in time, it cycles through
-- the last peer list Go gave for the backend.
--
-- In: backend names and nginx variables from the rewrite phase, completion
-- data from the log phase. Out: ordered candidate peers, the backend
-- actually used, Set-Cookie values, the EWMA score.
--
-- The other modules, one job each: switchyard.conn (the socket: pump,
-- reader, writer, asks), switchyard.wire (frames), switchyard.info (backend
-- infos, the fallback round robin), switchyard.routed (canary-routed
-- backends), switchyard.route (their rules), switchyard.lease,
-- switchyard.tables, switchyard.premade (decision data), switchyard.feedback
-- and switchyard.metrics (what goes back to Go), switchyard.state (what
-- they share), switchyard.options (settings; this module's table).

local ngx = ngx
local wire = require("switchyard.wire")
local char = string.char
local pairs = pairs
local ngx_var = ngx.var
local WARN = ngx.WARN
local T, TWO32 = wire.T, wire.TWO32
local u32, str8, str16, frame = wire.u32, wire.str8, wire.str16, wire.frame
local _M = require("switchyard.options")
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local lease = require("switchyard.lease")
local tables = require("switchyard.tables")
local premade = require("switchyard.premade")
local feedback = require("switchyard.feedback")
local metrics = require("switchyard.metrics")
local info_mod = require("switchyard.info")
local routed = require("switchyard.routed")
local get_slot, ask, new_id, log_once = conn.get_slot, conn.ask, conn.new_id, conn.log_once
local get_info, fallback = info_mod.get, info_mod.fallback
local ring_pick, request_table, shared_table = tables.ring_pick, tables.request_table, tables.shared_table
local sticky_cookie, new_session, more_session = tables.sticky_cookie, tables.new_session, tables.more
local take_leased, lease_next, take_leased_wait = lease.take, lease.next, lease.take_wait
local take_premade, vars_absent = premade.take, premade.vars_absent
local take_premade_wait = premade.take_wait
local routed_pick, routed_down = routed.pick, routed.down

_M.release = conn.release
_M.init_worker = conn.init_worker
_M.feedback = feedback.feedback
_M.observe_request = metrics.observe_request
_M.last = metrics.last

-- candidate returns the peer for attempt i (1, 2, ...) of result s and the
-- Set-Cookie it needs (or false). Attempts beyond the candidates cycle
-- through them.
--
-- A retry of a round-robin request decided from the worker's lease (or,
-- while Go is unreachable, its fallback rotation) takes the next position
-- of that rotation, and so uses it up, as ingress-nginx's round robin calls
-- find() again for each attempt: with one peer of four refusing
-- connections, each live peer gets a third of the requests
-- (TestShimDecisions). The position after the request's own was not
-- reserved for it: a retry taking it gave the refusing peer's successor
-- its share twice. A position whose peer this request already tried is
-- used up and passed over (ingress-nginx may repeat a failed peer when
-- other requests took the positions in between, or here when the next
-- lease is not contiguous with the last). A pick Go answered itself keeps
-- Go's candidates.
function _M.candidate(s, i)
  local info = s.rinfo
  if info then
    local cands = s.cands
    if i == 1 then
      local peer = s.rpeers[s.ridx + 1]
      cands[1] = peer
      return peer, false
    end
    local rname = s.rname or s.name
    if state.infos[rname] == info then
      local peers, np = info.peers, info.npeers
      for _ = 1, np do
        local idx
        if s.fallback then
          idx = info.rr % np
          info.rr = idx + 1
        else
          local _
          _, idx = lease_next(info, rname)
          if not idx then
            break
          end
        end
        local peer = peers[idx + 1]
        local seen = false
        for k = 1, i - 1 do
          if cands[k] == peer then
            seen = true
            break
          end
        end
        if not seen then
          cands[i] = peer
          return peer, false
        end
      end
    end
    -- Every peer tried, or no lease: continue from the request's own
    -- position.
    local peer = s.rpeers[((s.rpos + (i - 1) % s.n) % TWO32) % s.rn + 1]
    cands[i] = peer
    return peer, false
  end
  local rp = s.rpeers
  if rp then
    if i == 1 then
      return rp[s.ridx + 1], false
    end
    return rp[((s.rpos + (i - 1) % s.n) % TWO32) % s.rn + 1], false
  end
  if s.sinfo then
    -- A new sticky session made in the worker: a retry's candidate is
    -- made when the retry comes (tables.new_session).
    while s.made < i and s.made < s.n do
      if not more_session(s) then
        break
      end
    end
  end
  local k = (i - 1) % s.n + 1
  local cookie = s.cookies[k]
  if cookie and s.recipe then
    -- A new sticky session: cookies[k] is the upstream key; the
    -- Set-Cookie is written now, for the candidate that serves only.
    cookie = sticky_cookie(s.recipe, cookie)
  end
  return s.cands[k], cookie
end

-- pick_frame builds the pick frame of request id to backend name, with
-- the variables info names but skip.
local function pick_frame(id, name, info, skip)
  local nv = info.nvars
  if nv == 0 then
    return frame(T.PICK, id, str8(name) .. "\0")
  end
  local parts = { str8(name), char(0) }
  local k = 0
  local vars, names = info.vars, info.names
  for j = 1, nv do
    local v = vars[j] ~= skip and ngx_var[vars[j]]
    if v then
      k = k + 1
      parts[#parts + 1] = names[j]
      parts[#parts + 1] = str16(v)
    end
  end
  parts[2] = char(k)
  return frame(T.PICK, id, table.concat(parts))
end

-- same_vars reports whether two infos name the same variables.
local function same_vars(a, b)
  if a.nvars ~= b.nvars then
    return false
  end
  for j = 1, a.nvars do
    if a.names[j] ~= b.names[j] then
      return false
    end
  end
  return true
end

-- sticky_or_ring fills s from the backend's table (info.ring): a chash or
-- chashsubset key's peers, a returning sticky session's peer (with
-- change-on-failure, new sessions for its retries), or a new sticky
-- session, made here on the table as ingress-nginx makes one
-- (tables.new_session). It returns nil when the table does not decide the
-- request (Go is asked).
local function sticky_or_ring(s, info, name)
  if ring_pick(s, info, name) then
    local recipe = info.recipe
    if recipe and recipe.change_on_failure then
      return new_session(s, info, name, 1)
    end
    return s
  end
  return new_session(s, info, name)
end

-- down decides a request while Go is unreachable. The last table Go sent
-- keeps deciding: the same peers as before Go went away, sticky cookies
-- honoured, new sticky sessions made here on it (with their cookie). A
-- worker whose table of the backend's info never came (its ask was on the
-- wire when Go went) takes the one another worker left in the shared dict
-- for the same generation; only a backend without a table is round robin
-- over its last peer list.
local function down(s, info, name)
  log_once("fallback", "Go side unreachable; hash and sticky tables as last sent (new sticky sessions made on them), round robin over the last peer lists")
  if info.route then
    return routed_down(s, info, name)
  end
  if info.hashtable and not info.ring then
    shared_table(info, name)
  end
  if info.ring and sticky_or_ring(s, info, name) then
    return s
  end
  return fallback(s, info)
end

-- pick asks Go for the candidates of one request to backend name. It returns
-- a result table (code, alt, backend, score, n, cands, cookies; pass it to
-- release when the request is done), or nil when the backend is unknown or
-- nothing is known about it and Go cannot be reached (the caller answers
-- 503).
function _M.pick(name)
  local info = get_info(name)
  if not info then
    if info == nil then
      log_once("unavailable", "no answer from ", _M.socket, " about backend ", name)
    end
    return nil
  end
  local s = get_slot()
  s.name, s.attempt = name, 0
  if not state.connected then
    return down(s, info, name)
  end
  if info.leasable and take_leased(s, info, name) then
    return s
  end
  -- Decision data is used only while it is of Go's current generation
  -- (get_info waits for a fresh info, but returns the old one when Go does
  -- not answer in time).
  -- What Go is asked for: a pick of name, or of the backend the route
  -- chose (ask), without the variable skip.
  local ask_name, skip = name, nil
  if info.gen == state.gen and state.tables then
    if info.route then
      local r, c
      r, c, skip = routed_pick(s, info, name)
      if r then
        return s
      end
      -- Go picks: nothing of the data tried may stay on s. The route
      -- chose c: Go picks in c (an alternative has no alternatives of
      -- its own), so the worker's decision stands (a header pattern is
      -- read by PCRE here, RE2 in Go).
      s.rpeers, s.rinfo, s.recipe, s.rname, s.own = false, false, false, false, false
      if c and c ~= name then
        ask_name = c
      end
    elseif info.ring then
      if sticky_or_ring(s, info, name) then
        return s
      end
    elseif info.hashtable and not info.tpending and not info.tfailed then
      request_table(info, name, info.tloaded or 0)
    elseif info.premade and not info.pfailed and vars_absent(info) then
      -- Once Go has routed a request to a round-robin backend (s.own),
      -- requests wait for the batch on its way rather than ask Go for
      -- a pick: such a pick would take the next position of that
      -- rotation out of this worker's lease order.
      local took
      if info.owns then
        took = take_premade_wait(s, info, name)
      else
        took = take_premade(s, info, name)
      end
      if took then
        local own = s.own
        if not own then
          return s
        end
        -- Go routed the request (canary by weight) to a round-robin
        -- backend: its next position comes from a lease of that
        -- backend's own rotation, as a pick of it would take it.
        info.owns = true
        s.own = false
        local oinfo = info
        if own ~= name then
          oinfo = get_info(own)
        end
        local alt = s.alt
        if oinfo and oinfo.npeers > 0 and take_leased_wait(s, oinfo, own) then
          s.alt, s.rname = alt, own
          return s
        end
      end
    end
  end
  s.sinfo = false
  for round = 1, 2 do
    local id = new_id()
    if not ask(s, id, pick_frame(id, ask_name, info, skip)) then
      if not state.connected then
        -- Go went away while this request waited for its answer.
        return down(s, info, name)
      end
      log_once("timeout", "no pick answer within ", _M.timeout * 1000, " ms; round robin over the last peer list")
      return fallback(s, info)
    end
    if ask_name ~= name then
      if s.code == 0 and s.gen == info.gen then
        s.alt = true
        return s
      end
      -- Go's configuration changed since the route chose ask_name (it may
      -- be gone): Go routes the request itself, on the fresh info.
      ask_name, skip = name, nil
      info = get_info(name) or info
    elseif s.gen == info.gen or round == 2 then
      return s
    else
      -- Go's configuration changed since info: Go decided on the variables
      -- info named. Keep its decision if the new info names the same ones;
      -- else ask again with them.
      local fresh = get_info(name)
      if not fresh or fresh == info or same_vars(fresh, info) then
        return s
      end
      info = fresh
    end
  end
end

-- fallback_for returns a result from the last peer list without asking Go
-- (for phases that cannot wait: balancer_by_lua in locations with no
-- rewrite handler, such as custom error pages).
function _M.fallback_for(name)
  local info = state.infos[name]
  if not info then
    return nil
  end
  local s = get_slot()
  s.name, s.attempt = name, 0
  return fallback(s, info)
end

-- invalidate makes every backend info this worker holds, and the decision
-- data on it, unusable: the next request to each backend waits for a fresh
-- one. configuration.lua calls it when a POST of backends succeeded, so the
-- worker that served the POST decides nothing on the old backends after it
-- (the generation push may come a moment later).
function _M.invalidate()
  for _, info in pairs(state.infos) do
    info.gen = -1
  end
end

function _M.connected()
  return state.connected
end

_M._frame, _M._str8, _M._u32 = frame, str8, u32
_M.WARN = WARN

return _M
