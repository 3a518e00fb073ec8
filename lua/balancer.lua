-- balancer.lua: Switchyard's replacement for ingress-nginx's balancer.lua,
-- with the same entry points (init_worker, rewrite, balance, log) and the same
-- variable contract ($proxy_upstream_name in; $proxy_alternative_upstream_name
-- and $balancer_ewma_score out), so an nginx.conf rendered from
-- ingress-nginx's nginx.tmpl works unchanged. It holds no balancing logic: the
-- rewrite phase asks the Go balancer (switchyard.pick) for the request's
-- ordered candidates, and the balancer phase walks them, one per attempt.

local ngx = ngx
local ngx_balancer = require("ngx.balancer")
local pick = require("switchyard.pick")
local candidate = pick.candidate

local find, byte = string.find, string.byte
local log, WARN, ERR = ngx.log, ngx.WARN, ngx.ERR
local ngx_var = ngx.var
local set_more_tries, set_current_peer = ngx_balancer.set_more_tries, ngx_balancer.set_current_peer
local is_internal = ngx.req.is_internal

-- Each request's pick result lives in `results`, keyed by the address of
-- the request (resty.core's get_request), from rewrite to log, instead of in
-- ngx.ctx: a ctx table costs an allocation, a registry reference and a pool
-- cleanup per request, the largest single item of the shim's own CPU in the
-- nginx worker. A request's address is unique while it lives; rewrite always
-- stores a fresh result and log removes it. A request redirected internally
-- (ingress-nginx's @custom error locations have no rewrite hook and do not call
-- balancer.log) may find the result of its first location, so such a
-- request's result is used only for the same backend.
local results = {}
local get_request = require("resty.core.base").get_request
local ffi = require("ffi")
local cast, uintptr = ffi.cast, ffi.typeof("uintptr_t")
local function request_key()
  return tonumber(cast(uintptr, get_request()))
end

local _M = {}

-- configure sets switchyard.pick options (socket, timeout, ...) from a table;
-- call it from init_by_lua. ingress-nginx's template never calls it, so the
-- defaults are what a drop-in swap gets.
function _M.configure(opts)
  for k, v in pairs(opts or {}) do
    pick[k] = v
  end
end

function _M.init_worker()
  pick.init_worker()
end

-- get_balancer returns this request's pick result (nil before rewrite). The
-- name is ingress-nginx's; the value is ours.
function _M.get_balancer()
  return results[request_key()]
end

-- rewrite asks Go once per request: the canary decision and the candidates
-- are fixed for the retries and the log phase, as ingress-nginx's cached
-- ngx.ctx.balancer was.
function _M.rewrite()
  local key = request_key()
  local old = results[key]
  if old then
    -- A result of this request's previous location, or of a request that
    -- ended without the log phase (a subrequest) at the same address.
    results[key] = nil
    pick.release(old)
  end
  local res = pick.pick(ngx_var.proxy_upstream_name)
  if not res then
    return ngx.exit(ngx.HTTP_SERVICE_UNAVAILABLE)
  end
  local code = res.code
  if code ~= 0 then
    pick.release(res)
    if code == 1 then
      return ngx.exit(ngx.HTTP_SERVICE_UNAVAILABLE)
    elseif code == 2 then
      return ngx.exit(ngx.HTTP_BAD_GATEWAY)
    end
    return ngx.exit(ngx.HTTP_INTERNAL_SERVER_ERROR)
  end
  results[key] = res
  if res.alt then
    ngx.var.proxy_alternative_upstream_name = res.backend
  end
  if res.score then
    ngx.var.balancer_ewma_score = res.score
  end
end

-- prohibited reports whether peer matches ingress-nginx's pattern
-- ^127.*:<port>$ for the status port ("." matches anything): proxying there
-- would loop. The answer is kept per peer, since it runs on every attempt.
local prohibited_port, prohibited_pattern
local prohibited_seen, prohibited_n = {}, 0
local function prohibited(peer)
  local port = _M.prohibited_localhost_port
  if not port then
    local conf = package.loaded["configuration"]
    port = conf and conf.prohibited_localhost_port
    if not port then
      return false
    end
  end
  if port ~= prohibited_port then
    prohibited_port = port
    prohibited_pattern = "^127.*:" .. tostring(port) .. "$"
    prohibited_seen, prohibited_n = {}, 0
  end
  local p = prohibited_seen[peer]
  if p == nil then
    p = byte(peer, 1) == 49 and find(peer, prohibited_pattern) ~= nil -- "1": 127...
    if prohibited_n >= 10000 then
      prohibited_seen, prohibited_n = {}, 0
    end
    prohibited_seen[peer] = p
    prohibited_n = prohibited_n + 1
  end
  return p
end

-- set_cookie appends a Set-Cookie unless the same string is there already,
-- as lua-resty-cookie does: a request that picked a new peer on several
-- attempts carries several cookies, the last for the peer that served.
local function set_cookie(cookie)
  local cur = ngx.header["Set-Cookie"]
  if cur == nil then
    ngx.header["Set-Cookie"] = cookie
  elseif type(cur) == "string" then
    if cur ~= cookie then
      ngx.header["Set-Cookie"] = { cur, cookie }
    end
  else
    for i = 1, #cur do
      if cur[i] == cookie then
        return
      end
    end
    cur[#cur + 1] = cookie
    ngx.header["Set-Cookie"] = cur
  end
end

-- balance runs once per upstream attempt: the next candidate, set_more_tries
-- so nginx may try again, and the Set-Cookie of the peer that serves.
function _M.balance()
  local key = request_key()
  local res = results[key]
  if res and is_internal() and res.name ~= ngx_var.proxy_upstream_name then
    -- Redirected to a location of another backend without a rewrite hook.
    results[key] = nil
    pick.release(res)
    res = nil
  end
  if not res then
    -- Locations without a rewrite handler (custom error pages) reach here
    -- directly; this phase cannot ask Go, so use the last peer list.
    res = pick.fallback_for(ngx_var.proxy_upstream_name)
    if not res then
      log(WARN, "no peer was returned, balancer: ", ngx_var.proxy_upstream_name)
      return
    end
    results[key] = res
  end
  local n = res.n
  if n == 0 then
    log(WARN, "no peer was returned, balancer: ", res.backend)
    return
  end
  local i = res.attempt + 1
  res.attempt = i
  local peer, cookie = candidate(res, i)
  res.peer = peer
  if prohibited(peer) then
    log(ERR, "attempted to proxy to self, balancer: ", res.backend, ", peer: ", peer)
    return
  end
  set_more_tries(1)
  local ok, err = set_current_peer(peer)
  if not ok then
    log(ERR, "error while setting current upstream peer ", peer, ": ", err)
  end
  if cookie then
    set_cookie(cookie)
  end
end

function _M.log()
  if pick.request_metrics then
    pick.observe_request()
  end
  local key = request_key()
  local res = results[key]
  if not res then
    return
  end
  results[key] = nil
  pick.feedback(res)
  pick.release(res)
end

return _M
