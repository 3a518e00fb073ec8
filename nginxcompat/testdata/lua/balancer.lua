-- Stand-in for lua/balancer.lua, used ONLY so that `nginx -t` and the
-- nginxcompat tests can load a rendered nginx.conf before engineer H's shim
-- exists. It picks no peer itself: balance() sets the peer named by the
-- test through the $proxy_upstream_name variable ("ip:port").
local ngx_balancer = require("ngx.balancer")

local _M = {}

function _M.configure() end

function _M.init_worker() end

function _M.rewrite() end

function _M.balance()
  local name = ngx.var.proxy_upstream_name or ""
  local host, port = name:match("^(%d+%.%d+%.%d+%.%d+)%-(%d+)$")
  if not host then
    return ngx.exit(503)
  end
  local ok, err = ngx_balancer.set_current_peer(host, tonumber(port))
  if not ok then
    ngx.log(ngx.ERR, "set_current_peer: ", err)
    return ngx.exit(500)
  end
end

function _M.log() end

return _M
