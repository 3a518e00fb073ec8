-- configuration.lua: Switchyard's replacement for ingress-nginx's
-- configuration.lua. The /configuration/* handlers forward each request
-- (method, URI, body) to the Go process's ingress-nginx compatible API on a
-- unix socket and answer with Go's status code and body, so an unmodified
-- ingress-nginx controller's POSTs drive the Go balancer. Certificates
-- POSTed to /configuration/servers are also kept in ingress-nginx's shared
-- dicts when they exist, so its certificate.lua keeps serving dynamic
-- certificates.

local ngx = ngx
local cjson = require("cjson.safe")

local _M = {
  -- api_socket is the Go process's configuration API ("unix:/path").
  api_socket = "unix:/var/run/switchyard/configuration.sock",
  -- timeout for one forwarded request, in milliseconds.
  timeout = 10000,
  -- prohibited_localhost_port is set by ingress-nginx's init_by_lua; the
  -- balancer refuses peers on it, as ingress-nginx's did.
  prohibited_localhost_port = nil,
}

local EMPTY_UID = "-1"

-- forward sends one HTTP/1.0 request to Go and returns status, body.
local function forward(method, uri, body)
  local sock = ngx.socket.tcp()
  sock:settimeout(_M.timeout)
  local ok, err = sock:connect(_M.api_socket)
  if not ok then
    return nil, "connect " .. _M.api_socket .. ": " .. tostring(err)
  end
  local req = {
    method, " ", uri, " HTTP/1.0\r\nHost: localhost\r\n",
    "Content-Length: ", tostring(body and #body or 0), "\r\n\r\n", body or "",
  }
  ok, err = sock:send(req)
  if not ok then
    sock:close()
    return nil, "send: " .. tostring(err)
  end
  local line
  line, err = sock:receive("*l")
  if not line then
    sock:close()
    return nil, "status line: " .. tostring(err)
  end
  local status = tonumber(line:match("^HTTP/%d%.%d (%d%d%d)"))
  if not status then
    sock:close()
    return nil, "bad status line: " .. line
  end
  repeat
    line, err = sock:receive("*l")
    if not line then
      sock:close()
      return nil, "headers: " .. tostring(err)
    end
  until line == ""
  local data
  data, err = sock:receive("*a")
  sock:close()
  if not data then
    return nil, "body: " .. tostring(err)
  end
  return status, data
end
_M.forward = forward

local function read_body()
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if not body then
    local file = ngx.req.get_body_file()
    if file then
      local f = io.open(file, "rb")
      if f then
        body = f:read("*a")
        f:close()
      end
    end
  end
  return body
end

-- keep_certificates mirrors a /configuration/servers body into
-- ingress-nginx's certificate dicts (only present in its nginx.conf).
local function keep_certificates(body)
  local servers_dict = ngx.shared.certificate_servers
  local certs_dict = ngx.shared.certificate_data
  if not servers_dict or not certs_dict then
    return
  end
  local data = cjson.decode(body)
  if type(data) ~= "table" then
    return
  end
  for server, uid in pairs(type(data.servers) == "table" and data.servers or {}) do
    if uid == EMPTY_UID then
      servers_dict:delete(server)
    elseif type(uid) == "string" then
      local ok, err = servers_dict:safe_set(server, uid)
      if not ok then
        ngx.log(ngx.ERR, "error setting certificate for ", server, ": ", err)
      end
    end
  end
  for uid, pem in pairs(type(data.certificates) == "table" and data.certificates or {}) do
    if type(pem) == "string" then
      local ok, err = certs_dict:safe_set(uid, pem)
      if not ok then
        ngx.log(ngx.ERR, "error setting certificate ", uid, ": ", err)
      end
    end
  end
end

-- call is the content handler of `location /configuration`.
function _M.call()
  local method = ngx.req.get_method()
  local body
  if method == "POST" or method == "PUT" then
    body = read_body()
  end
  local status, data = forward(method, ngx.var.request_uri, body)
  if not status then
    ngx.log(ngx.ERR, "switchyard configuration: ", data)
    ngx.status = ngx.HTTP_SERVICE_UNAVAILABLE
    ngx.print("switchyard balancer unreachable")
    return ngx.exit(ngx.OK)
  end
  if status == 201 and method == "POST" and ngx.var.request_uri == "/configuration/servers" and body then
    keep_certificates(body)
  end
  if status == 201 and method == "POST" and ngx.var.request_uri == "/configuration/backends" then
    -- Go holds the new backends: this worker decides no request on what it
    -- knew before (the other workers learn it from Go's generation push).
    local pick = package.loaded["switchyard.pick"]
    if pick then
      pick.invalidate()
    end
  end
  ngx.status = status
  ngx.print(data)
  return ngx.exit(ngx.OK)
end

-- get_backends_data answers /is-dynamic-lb-initialized: non-nil once Go
-- holds backends.
function _M.get_backends_data()
  local status, data = forward("GET", "/is-dynamic-lb-initialized", nil)
  if status ~= 200 then
    return nil
  end
  return data
end

-- get_general_data is ingress-nginx's leftover accessor, kept for dbg.
function _M.get_general_data()
  local status, data = forward("GET", "/configuration/general", nil)
  if status ~= 200 then
    return nil
  end
  return data
end

return _M
