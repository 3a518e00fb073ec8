-- switchyard.route: the canary routing of a backend with an alternative,
-- from the route Go sends with its backend info (docs/pick-protocol.md,
-- "Routed backends"; Go's balancer.Route): the rules of ingress-nginx's
-- route_to_alternative_balancer that read only the request (affinity,
-- header, header pattern, cookie) evaluated on this request's variables,
-- and the weight rule left to a draw Go made ahead (premade), unless the
-- weight decides alone (0, or the whole total).
-- In: a backend info's route, the request's variables. Out: the chosen
-- backend and whether it is the alternative, or DRAW.

local ngx = ngx
local find, sub = string.find, string.sub
local ngx_var = ngx.var
local re_match = ngx.re.match
local cookie_value = require("switchyard.tables").cookie_value

local _M = {
  -- decide's answer when no rule decided: the weight rule's draw is
  -- needed.
  DRAW = 1,
  -- Where the peers of a routed request come from (balancer.OwnData).
  OWN_LEASE = 1, OWN_TABLE = 2, OWN_STICKY = 3, OWN_PICKS = 4,
}
local DRAW = _M.DRAW

-- backend_key returns the backend key of sticky cookie name in the Cookie
-- header: the second non-empty '|'-separated piece of its value (Go's
-- splitStickyValue), or nil.
local function backend_key(header, name)
  local v = cookie_value(header, name)
  if not v then
    return nil
  end
  local _, e = find(v, "[^|]+")
  if not e then
    return nil
  end
  local a, b = find(v, "[^|]+", e + 1)
  if not a then
    return nil
  end
  return sub(v, a, b)
end

-- affinitized reports whether the request's cookie of that name carries
-- key as its backend key (sticky's is_affinitized).
local function affinitized(cname, key)
  if cname == "" then
    return false
  end
  local header = ngx_var.http_cookie
  return header ~= nil and backend_key(header, cname) == key
end

-- decide returns the backend a request to name goes to and whether it is
-- the alternative, or nil and DRAW; and third, true when a header pattern
-- read the request's header and did not match it (a pick asked of Go for
-- such a request leaves the header out, so that Go's RE2 cannot read it
-- otherwise: pick.lua). The first rule that applies decides:
-- the primary's affinity, no alternative now, the alternative's affinity,
-- the header, the cookie, then the weight. A header pattern is matched
-- here, whether Go answers or not, with nginx's PCRE as ingress-nginx's
-- balancer.lua matches it (ngx.re.match, unanchored, no flags: "jo" only
-- compiles it once per worker): a match routes, an error keeps the
-- primary, no match falls through (TestShimHeaderPattern; issue 16).
function _M.decide(rt, name)
  if affinitized(rt.pcookie, rt.pkey) then
    return name, false
  end
  local alt = rt.alt
  if alt == "" then
    return name, false
  end
  if affinitized(rt.acookie, rt.akey) then
    return alt, true
  end
  local mode, missed = rt.hmode, false
  if mode ~= 0 then
    local h = ngx_var[rt.hvar]
    if h then
      if mode == 1 then
        if h == rt.hvalue then
          return alt, true
        end
      elseif mode == 2 then
        local m, err = re_match(h, rt.hvalue, "jo")
        if m then
          return alt, true
        elseif err then
          return name, false
        end
        missed = true
      elseif mode == 3 then
        return name, false
      elseif h == "always" then
        return alt, true
      elseif h == "never" then
        return name, false
      end
    end
  end
  if rt.cvar ~= "" then
    local c = ngx_var[rt.cvar]
    if c == "always" then
      return alt, true
    elseif c == "never" then
      return name, false, missed
    end
  end
  local w = rt.weight
  if w <= 0 then
    return name, false, missed
  elseif w >= rt.total then
    return alt, true
  end
  return nil, DRAW, missed
end

local decide = _M.decide

-- decide_local is decide with the weight drawn here (math.random, as
-- ingress-nginx draws it), for while Go cannot answer.
function _M.decide_local(rt, name)
  local c, how = decide(rt, name)
  if c then
    return c, how
  end
  if how == DRAW and math.random(rt.total) <= rt.weight then
    return rt.alt, true
  end
  return name, false
end

return _M
