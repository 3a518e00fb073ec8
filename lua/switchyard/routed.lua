-- switchyard.routed: the requests of a backend whose info carries Go's
-- canary route (docs/pick-protocol.md, "Routed backends"): the route
-- decided in the worker (switchyard.route), the weight rule's draw taken
-- from Go's premade draws, then the chosen backend's own decision data
-- (its lease, table or premade picks); while Go is down, the route with
-- the weight drawn here, then the chosen backend's last table or peers.
-- In: a result slot, the backend's info and name. Out: the slot filled,
-- or what Go must be asked instead. Tests: TestShimTables (canaries of
-- every kind), TestShimHeaderPattern, TestShimCanaryGoDown,
-- TestShimUnderLoad.

local state = require("switchyard.state")
local lease = require("switchyard.lease")
local tables = require("switchyard.tables")
local premade = require("switchyard.premade")
local route = require("switchyard.route")
local info_mod = require("switchyard.info")
local get_info, fallback = info_mod.get, info_mod.fallback
local ring_pick, request_table, shared_info = tables.ring_pick, tables.request_table, tables.shared_info
local new_session = tables.new_session
local take_leased, take_leased_wait = lease.take, lease.take_wait
local take_premade = premade.take
local take_premade_wait, take_premade_for = premade.take_wait, premade.take_for
local decide, decide_local = route.decide, route.decide_local
local OWN_LEASE, OWN_PICKS, OWN_STICKY = route.OWN_LEASE, route.OWN_PICKS, route.OWN_STICKY

local _M = {}

-- own_premade fills s with premade picks of backend c (ewma, least_request)
-- for a request a rule routed there: a canary's own batch, or for the
-- primary name the next of its draws that chose it (premade.take_for).
local function own_premade(s, info, name, cinfo, c)
  if not cinfo.premade or cinfo.pfailed then
    return false
  end
  if c ~= name then
    return take_premade(s, cinfo, c)
  end
  local rt = info.route
  if rt.alt ~= "" and rt.weight >= rt.total then
    return false -- every draw chose the canary
  end
  return take_premade_for(s, info, name, c)
end

-- own_pick fills s for a request to backend name that the route sent to
-- backend c (alt: the alternative), from c's own decision data of kind own
-- (route.OWN_*): the next position of a lease of its rotation, its table,
-- or premade picks. drawn: the request took a premade draw of name's
-- weight rule, and s holds what that entry carries (c's picks, or a new
-- session of c). It returns s, or nil when c's data is not at hand (the
-- request asks Go, which routes it again).
local function own_pick(s, info, name, c, alt, own, drawn)
  local cinfo = info
  if c ~= name then
    cinfo = get_info(c)
    if not cinfo or cinfo.gen ~= state.gen then
      return nil
    end
  end
  if own == OWN_LEASE then
    -- Once a lease served a request routed here, requests wait for the
    -- draws or lease on their way rather than ask Go, whose pick would
    -- take a position of its rotation out of this worker's lease order.
    -- Until then (a new info: a new configuration, or the worker's first
    -- requests) a request without a lease at hand asks Go: when each
    -- request waited for a fresh lease and used only its first position
    -- (leases then expired between slow requests), every request got the
    -- same peer (a lease's length is often a multiple of the peers; 20 of
    -- 20 in TestControllerNginxDataPlane on a loaded machine).
    if cinfo.npeers == 0 then
      return nil
    end
    local took
    if info.owns then
      took = take_leased_wait(s, cinfo, c)
    else
      took = take_leased(s, cinfo, c)
    end
    if took then
      info.owns = true
      s.alt, s.rname = alt, c
      return s
    end
    return nil
  end
  if own == OWN_PICKS then
    if drawn then
      return s
    end
    -- An ewma or least_request backend chosen by a rule: a canary's own
    -- premade picks, or the primary's from the next of its draws that
    -- chose it.
    if own_premade(s, info, name, cinfo, c) then
      s.alt = alt
      return s
    end
    return nil
  end
  if not cinfo.ring then
    if cinfo.hashtable and not cinfo.tpending and not cinfo.tfailed then
      request_table(cinfo, c, cinfo.tloaded or 0)
    end
    return nil
  end
  if ring_pick(s, cinfo, c) then
    local recipe = cinfo.recipe
    if recipe and recipe.change_on_failure then
      -- change-on-failure: the retries are new sessions of c, made here
      -- on c's table (tables.new_session).
      new_session(s, cinfo, c, 1)
    end
    s.alt = alt
    return s
  end
  if own ~= OWN_STICKY then
    return nil
  end
  -- A new sticky session: the draw's entry carries one of c's, written
  -- with c's recipe; one a rule sent to c is made here on c's table, as
  -- ingress-nginx makes it (tables.new_session).
  if drawn then
    if s.recipe_src == cinfo then
      return s
    end
    return nil
  end
  if new_session(s, cinfo, c) then
    s.alt = alt
    return s
  end
  return nil
end

-- pick fills s for a request to a backend whose info carries a route
-- (a canary the shim routes itself, docs/pick-protocol.md "Routed
-- backends") and returns it; or, when Go must pick, returns nil, the
-- backend the route chose (nil when not known) and the variable to leave
-- out of the pick frame (a header a pattern read without matching: Go's
-- RE2 must not read it again).
function _M.pick(s, info, name)
  local rt = info.route
  local c, alt, missed = decide(rt, name)
  local skip = missed and rt.hvar or nil
  local drawn = false
  if not c then
    if not info.premade or info.pfailed then
      return nil, nil, skip
    end
    local took
    if info.owns then
      took = take_premade_wait(s, info, name)
    else
      took = take_premade(s, info, name)
    end
    if not took then
      return nil, nil, skip
    end
    drawn = true
    c, alt = s.own or s.backend, s.alt
    s.own = false
  end
  if own_pick(s, info, name, c, alt, c == name and rt.pown or rt.aown, drawn) then
    return s
  end
  return nil, c, skip
end

-- down is pick while Go cannot answer: the route decided here
-- (the weight drawn here too), then the chosen backend's last table, or
-- its last peer list round robin.
function _M.down(s, info, name)
  local c, alt = decide_local(info.route, name)
  local cinfo = info
  if c ~= name then
    cinfo = state.infos[c] or shared_info(c)
    if not cinfo then
      cinfo, c, alt = info, name, false
    end
  end
  s.name = c
  local r = cinfo.ring and (ring_pick(s, cinfo, c) or new_session(s, cinfo, c)) or fallback(s, cinfo)
  s.name = name
  if r then
    r.alt, r.backend = alt, c
    if cinfo ~= info then
      r.rname = c
    end
  end
  return r
end

return _M
