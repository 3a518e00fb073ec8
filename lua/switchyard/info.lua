-- switchyard.info: what a worker knows of each backend (docs/pick-protocol.md,
-- "0x03 backend info"): the info Go sent, asked once per backend and
-- generation and waited for (an old one serves only while Go cannot
-- answer), the alternative's fetched alongside a routed backend's, the
-- shared dict's when this worker has none while Go is away; and the
-- round robin over a backend's last peer list while Go cannot answer.
-- In: backend names. Out: infos (wire.parse_info's tables), fallback
-- results. Tests: TestShimDecisions (no decision on an old info),
-- TestShimCanaryGoDown, TestShimUnderLoad (an nginx reload with Go down).

local ngx = ngx
local wire = require("switchyard.wire")
local min = math.min
local T, str8, frame = wire.T, wire.str8, wire.frame
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local tables = require("switchyard.tables")
local get_slot, ask, new_id, release = conn.get_slot, conn.ask, conn.new_id, conn.release
local request_table, shared_info = tables.request_table, tables.shared_info

local _M = {}

-- prefetching: the backends whose info a timer is asking for (prefetch).
local prefetching = {}

local get_info

local function prefetch(premature, name)
  if not premature then
    -- Its table too: a fresh info without one would leave a worker with
    -- Go down nothing but round robin over its peers for that backend
    -- (where the last generation's info still had its table).
    local info = get_info(name)
    if info and info.hashtable and not info.ring and not info.tpending and not info.tfailed and state.connected then
      request_table(info, name, info.tloaded or 0)
    end
  end
  prefetching[name] = nil
end

-- get returns what Go said about a backend (variables, fallback peers),
-- asking Go and waiting when this worker has never heard of it, or when
-- its info is of another generation than Go's last reply: a request is
-- never decided on the variables, lease or peers of an old configuration
-- (TestShimDecisions). Only when Go cannot answer is the old info used,
-- for the fallback round robin over its peers.
function get_info(name)
  local info = state.infos[name]
  if info and (info.gen == state.gen or not state.connected) then
    return info
  end
  if not info and not state.connected then
    return shared_info(name)
  end
  local s = get_slot()
  s.name, s.info = name, nil
  local id = new_id()
  if not ask(s, id, frame(T.INFO, id, str8(name))) then
    release(s)
    return info
  end
  info = s.info
  s.info = nil
  release(s)
  if info.unknown then
    return false
  end
  local rt = info.route
  if rt and rt.alt ~= "" and not prefetching[rt.alt] then
    local ai = state.infos[rt.alt]
    if not ai or ai.gen ~= info.gen then
      -- The alternative's info and table too, in the background: with
      -- Go down, a worker whose requests never went to the canary still
      -- routes the canary's share there (switchyard.routed down), from
      -- its own infos or the shared dict, instead of keeping it on the
      -- primary.
      prefetching[rt.alt] = true
      if not ngx.timer.at(0, prefetch, rt.alt) then
        prefetching[rt.alt] = nil
      end
    end
  end
  return info
end

-- fallback fills s from the backend's last peer list, round robin.
function _M.fallback(s, info)
  local np = info.npeers
  if np == 0 then
    return nil
  end
  local idx = info.rr % np
  info.rr = idx + 1
  s.rpeers, s.rn, s.rpos, s.ridx, s.rinfo = info.peers, np, idx, idx, info
  s.n, s.code, s.alt, s.score, s.backend, s.fallback = min(np, 3), 0, false, nil, s.name, true
  return s
end

_M.get = get_info

return _M
