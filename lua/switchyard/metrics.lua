-- switchyard.metrics: ingress-nginx's request metrics, aggregated per label
-- set in the log phase and sent to Go every flush_interval (0x06): count
-- and duration histogram, and the upstream connect times.
-- In: the log phase's variables. Out: requests frames.

local ngx = ngx
local wire = require("switchyard.wire")
local char, match = string.char, string.match
local floor, min, random = math.floor, math.min, math.random
local tonumber, pairs = tonumber, pairs
local ngx_var = ngx.var
local ngx_now = ngx.now
local T, TWO32 = wire.T, wire.TWO32
local u16, u32, str16, frame = wire.u16, wire.u32, wire.str16, wire.frame
local opts = require("switchyard.options")
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local enqueue = conn.enqueue

local _M = {}

-- last returns the last value of an nginx $upstream_* list: attempts are
-- separated by ", ", internal redirects by " : " ("a:80, b:80 : c:80").
local function last(v)
  if not v then
    return nil
  end
  return match(v, "([^%s,]+)%s*$")
end
_M.last = last

-- requests aggregates request metrics: label key -> {count, sum_us,
-- b1..b12, connect count, connect sum_us, connect samples (or false)}.
local requests = {}
local requests_dirty = false
-- Prometheus' default buckets, in seconds; the 12th counts the rest.
local BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }
local NB = #BUCKETS
-- Indexes of a label set's connect count, sum and samples.
local C_COUNT, C_SUM, C_SAMPLES = NB + 4, NB + 5, NB + 6
-- SAMPLES_MAX bounds the connect times kept per label set and flush (the
-- protocol's MaxSamples): past it, a uniform sample of them (reservoir
-- sampling); the count and sum stay exact.
local SAMPLES_MAX = 1024
-- The largest frame body (the protocol's 65536-byte bound less the type,
-- version and id) and the fixed part of a requests frame body with its
-- connect-time section.
local MAX_BODY, REQUESTS_FIXED = 65530, 1 + 2 + 4 + 8 + 1 + 4 * (NB + 1) + 4 + 8 + 2

local last_flush = 0
local function flush_requests()
  local now = ngx_now()
  if not requests_dirty or now - last_flush < opts.flush_interval then
    return
  end
  last_flush = now
  local r = requests
  requests, requests_dirty = {}, false
  for key, m in pairs(r) do
    local parts = { "\0", str16(key), u32(m[1]), u32(floor(m[2] / TWO32)), u32(m[2] % TWO32), char(NB + 1) }
    for k = 1, NB + 1 do
      parts[#parts + 1] = u32(m[2 + k])
    end
    local cn = m[C_COUNT]
    if cn > 0 and state.connect_section then
      -- The connect-time section: count, sum, then the samples, as many
      -- as fit in one frame.
      local samples, csum = m[C_SAMPLES], m[C_SUM]
      local ns = min(cn, SAMPLES_MAX, floor((MAX_BODY - REQUESTS_FIXED - #key) / 4))
      if ns < 0 then
        ns = 0
      end
      parts[#parts + 1] = u32(cn)
      parts[#parts + 1] = u32(floor(csum / TWO32))
      parts[#parts + 1] = u32(csum % TWO32)
      parts[#parts + 1] = u16(ns)
      for k = 1, ns do
        parts[#parts + 1] = u32(samples[k])
      end
    end
    enqueue(frame(T.REQUESTS, 0, table.concat(parts)))
  end
end

local METHODS = { GET = "GET", HEAD = "HEAD", POST = "POST", PUT = "PUT", DELETE = "DELETE", PATCH = "PATCH",
  OPTIONS = "OPTIONS", CONNECT = "CONNECT", TRACE = "TRACE" }

-- observe_request counts the request in its label set (log phase). Label
-- values come from the configuration ($server_name, the location's
-- variables) or small fixed sets (status, method), never raw request data.
function _M.observe_request()
  local host = ""
  if opts.metrics_per_host then
    host = ngx_var.server_name or ""
  end
  local key = host .. "\t" .. (ngx_var.status or "") .. "\t" .. (METHODS[ngx_var.request_method] or "OTHER") .. "\t" ..
    (ngx_var.location_path or "") .. "\t" .. (ngx_var.namespace or "") .. "\t" .. (ngx_var.ingress_name or "") .. "\t" ..
    (ngx_var.service_name or "") .. "\t" .. (ngx_var.proxy_alternative_upstream_name or "")
  local m = requests[key]
  if not m then
    m = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false }
    requests[key] = m
  end
  local t = tonumber(ngx_var.request_time) or 0
  m[1] = m[1] + 1
  m[2] = m[2] + floor(t * 1000000 + 0.5)
  local k = NB + 1
  for j = 1, NB do
    if t <= BUCKETS[j] then
      k = j
      break
    end
  end
  m[2 + k] = m[2 + k] + 1
  -- ingress-nginx's ingress_upstream_latency_seconds observes
  -- $upstream_connect_time, and skips requests where tonumber() fails: no
  -- upstream, "-" (the connection failed), or several attempts ("0.001,
  -- 0.002"). Here several attempts count with the last one's time.
  local ct = ngx_var.upstream_connect_time
  if ct then
    local x = tonumber(ct) or tonumber(last(ct))
    -- Not NaN, not negative, under 2^32 microseconds.
    if x and x >= 0 and x < 4294 then
      local us = floor(x * 1000000 + 0.5)
      local n = m[C_COUNT] + 1
      m[C_COUNT] = n
      m[C_SUM] = m[C_SUM] + us
      local samples = m[C_SAMPLES]
      if not samples then
        samples = {}
        m[C_SAMPLES] = samples
      end
      if n <= SAMPLES_MAX then
        samples[n] = us
      else
        local j = random(n)
        if j <= SAMPLES_MAX then
          samples[j] = us
        end
      end
    end
  end
  requests_dirty = true
end

_M.last = last
conn.flushers[#conn.flushers + 1] = flush_requests

return _M
