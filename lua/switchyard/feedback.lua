-- switchyard.feedback: the outcome of every request's attempts, back to Go:
-- per request with timings for backends Go scores (ewma, 0x02), per-peer
-- counts summed over flush_interval otherwise (0x05).
-- In: the log phase's $upstream_* variables. Out: feedback frames.

local ngx = ngx
local wire = require("switchyard.wire")
local char, find = string.char, string.find
local floor, min = math.floor, math.min
local tonumber, pairs = tonumber, pairs
local ngx_var = ngx.var
local ngx_now = ngx.now
local T = wire.T
local u16, u32, str8, frame = wire.u16, wire.u32, wire.str8, wire.frame
local opts = require("switchyard.options")
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local metrics = require("switchyard.metrics")
local enqueue, last = conn.enqueue, metrics.last

local _M = {}

-- counts aggregates completions of backends Go does not score:
-- backend -> peer -> {completed, failed}; flushed every flush_interval.
local counts = {}
local counts_dirty = false
local last_flush = 0

local function flush_counts()
  local now = ngx_now()
  if not counts_dirty or now - last_flush < opts.flush_interval then
    return
  end
  last_flush = now
  local c = counts
  counts, counts_dirty = {}, false
  for backend, peers in pairs(c) do
    local b8 = str8(backend)
    for peer, n in pairs(peers) do
      enqueue(frame(T.COUNTS, 0, b8 .. str8(peer) .. u32(n[1]) .. u32(n[2])))
    end
  end
end

-- usec1 is usec of a variable that holds one value.
local function usec1(v)
  local x = tonumber(v)
  if not x or x < 0 then
    return 0
  end
  return min(floor(x * 1000000 + 0.5), 4294967295)
end

local function usec(v)
  local x = tonumber(last(v))
  if not x or x < 0 then
    return 0
  end
  return min(floor(x * 1000000 + 0.5), 4294967295)
end

local function count(backend, peer, failed)
  local bc = counts[backend]
  if not bc then
    bc = {}
    counts[backend] = bc
  end
  local c = bc[peer]
  if not c then
    c = { 0, 0 }
    bc[peer] = c
  end
  c[1] = c[1] + 1
  if failed then
    c[2] = c[2] + 1
  end
  counts_dirty = true
end

-- feedback reports the request's attempts to Go: for backends Go scores
-- (ewma), the last attempt's timings in a frame of its own (and a failure
-- for each earlier attempt); for the others, per-peer counts summed locally
-- and sent every flush_interval. Either way it rides on the next write.
function _M.feedback(s)
  local name = s and s.backend
  if not name or s.n == 0 then
    return
  end
  local info = state.infos[name]
  local unscored = info and not info.scored
  local status = ngx.status
  if unscored and s.attempt == 1 and status < 502 then
    -- One attempt, on the first candidate, and a response that is not
    -- nginx's own 502/504: a completion, without reading $upstream_addr.
    count(name, s.peer, false)
    return
  end
  local addrs = ngx_var.upstream_addr
  if not addrs then
    return
  end
  if unscored then
    if not find(addrs, ",", 1, true) and not find(addrs, " ", 1, true) then
      -- One attempt. It failed only if no response header came back, and
      -- then nginx answers 502 or 504 itself: read the variable only then.
      local failed = false
      if status >= 502 then
        failed = ngx_var.upstream_header_time == "-"
      end
      count(name, addrs, failed)
      return
    end
    local lastpeer = last(addrs)
    local n, k = 0, 0
    for a in string.gmatch(addrs, "[^%s,]+") do
      if a ~= ":" then
        n = n + 1
      end
    end
    for a in string.gmatch(addrs, "[^%s,]+") do
      if a ~= ":" then
        k = k + 1
        if k < n then
          count(name, a, true)
        end
      end
    end
    count(name, lastpeer, last(ngx_var.upstream_header_time) == "-")
    return
  end
  local backend = str8(name)
  if not find(addrs, ",", 1, true) and not find(addrs, " ", 1, true) then
    -- One attempt (the common case): the variables hold one value each,
    -- read as they are, without splitting lists.
    local header = ngx_var.upstream_header_time
    enqueue(frame(T.DONE, 0, backend .. str8(addrs) .. u32(usec1(ngx_var.upstream_connect_time)) ..
      u32(usec1(header)) .. u32(usec1(ngx_var.upstream_response_time)) ..
      u16(tonumber(ngx_var.upstream_status) or 0) .. ((header == nil or header == "-") and "\1" or "\0")))
    return
  end
  -- Earlier attempts failed (nginx moved on to the next peer).
  local count = 0
  for a in string.gmatch(addrs, "[^%s,]+") do
    if a ~= ":" then
      count = count + 1
    end
  end
  if count > 1 then
    local k = 0
    for a in string.gmatch(addrs, "[^%s,]+") do
      if a ~= ":" then
        k = k + 1
        if k < count then
          enqueue(frame(T.DONE, 0, backend .. str8(a) .. "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1"))
        end
      end
    end
  end
  local peer = last(addrs)
  local header = last(ngx_var.upstream_header_time)
  local failed = (header == nil or header == "-") and 1 or 0
  local status = tonumber(last(ngx_var.upstream_status)) or 0
  enqueue(frame(T.DONE, 0, backend .. str8(peer) .. u32(usec(ngx_var.upstream_connect_time)) ..
    u32(usec(header)) .. u32(usec(ngx_var.upstream_response_time)) .. u16(status) .. char(failed)))
end

conn.flushers[#conn.flushers + 1] = flush_counts

return _M
