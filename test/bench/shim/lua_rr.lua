-- Stand-in for ingress-nginx's Lua round robin (benchmark variant b): a
-- per-worker rotation over the peers in balancer_by_lua, nothing else.
local ngx_balancer = require("ngx.balancer")

local _M = { peers = {} }
local idx = 0

function _M.balance()
  local peers = _M.peers
  idx = idx % #peers + 1
  ngx_balancer.set_more_tries(1)
  local ok, err = ngx_balancer.set_current_peer(peers[idx])
  if not ok then
    ngx.log(ngx.ERR, "set_current_peer: ", err)
  end
end

return _M
