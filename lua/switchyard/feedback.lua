-- switchyard.feedback: the outcome of every request's attempts, back to Go:
-- per-peer counts summed over flush_interval (0x05), with the attempts'
-- timings summed too for backends Go scores (ewma); to a Go side that does
-- not take timed counts, a frame per request with its timings (0x02).
-- In: the log phase's $upstream_* variables. Out: feedback frames.

local ngx = ngx
local wire = require("switchyard.wire")
local char, find, gmatch = string.char, string.find, string.gmatch
local floor, min = math.floor, math.min
local tonumber, pairs = tonumber, pairs
local ngx_var = ngx.var
local ngx_now = ngx.now
local T = wire.T
local u16, u32, str8, frame = wire.u16, wire.u32, wire.str8, wire.frame
local TWO32 = wire.TWO32
local opts = require("switchyard.options")
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local metrics = require("switchyard.metrics")
local enqueue, last = conn.enqueue, metrics.last

local _M = {}

-- counts aggregates completions: backend -> peer -> {completed, failed,
-- and for a backend Go scores: the successful attempts' connect plus
-- response times summed and the longest, in microseconds, or false};
-- flushed every flush_interval.
--
-- Issue 16: ewma's feedback was a frame per request, made in the log phase
-- and read by Go one by one; at 1 worker and 8 connections its p99 was
-- 1.5-1.9x the real Lua's, and 1.03x with no feedback at all
-- (docs/benchmarks.md, "ewma's feedback"). Summed, a flush is a few frames
-- whatever the request rate, and Go moves each peer's score by the mean
-- of its attempts (balancer.Registry.CountTimed).
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
      local body = b8 .. str8(peer) .. u32(n[1]) .. u32(n[2])
      if n[3] then
        local sum = n[3]
        body = body .. u32(floor(sum / TWO32)) .. u32(sum % TWO32) .. u32(n[4])
      end
      enqueue(frame(T.COUNTS, 0, body))
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

-- count adds an attempt on peer; for a backend Go scores (timed), a
-- successful attempt's rtt too: ewma.lua's connect plus response time, in
-- microseconds.
local function count(backend, peer, failed, timed, rtt)
  local bc = counts[backend]
  if not bc then
    bc = {}
    counts[backend] = bc
  end
  local c = bc[peer]
  if not c then
    c = { 0, 0, timed and 0 or false, 0 }
    bc[peer] = c
  end
  c[1] = c[1] + 1
  if failed then
    c[2] = c[2] + 1
  elseif timed and c[3] then
    c[3] = c[3] + rtt
    if rtt > c[4] then
      c[4] = rtt
    end
  end
  counts_dirty = true
end

-- each_earlier calls f(x, y, peer) for each attempt of an $upstream_addr
-- list but the last: nginx moved on from them, so they failed.
local function each_earlier(addrs, f, x, y)
  local n = 0
  for a in gmatch(addrs, "[^%s,]+") do
    if a ~= ":" then
      n = n + 1
    end
  end
  local k = 0
  for a in gmatch(addrs, "[^%s,]+") do
    if a ~= ":" then
      k = k + 1
      if k < n then
        f(x, y, a)
      end
    end
  end
end

-- count_failed counts a failed earlier attempt (each_earlier).
local function count_failed(name, scored, peer)
  count(name, peer, true, scored)
end

-- done_failed sends a failed earlier attempt's 0x02 frame (each_earlier).
local function done_failed(backend, _, peer)
  enqueue(frame(T.DONE, 0, backend .. str8(peer) .. "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1"))
end

-- done_frames sends a scored backend's request to a Go side that does not
-- take timed counts: the last attempt's timings in a frame of its own, and
-- a failure for each earlier attempt.
local function done_frames(name)
  local addrs = ngx_var.upstream_addr
  if not addrs then
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
  each_earlier(addrs, done_failed, backend)
  local peer = last(addrs)
  local header = last(ngx_var.upstream_header_time)
  local failed = (header == nil or header == "-") and 1 or 0
  local status = tonumber(last(ngx_var.upstream_status)) or 0
  enqueue(frame(T.DONE, 0, backend .. str8(peer) .. u32(usec(ngx_var.upstream_connect_time)) ..
    u32(usec(header)) .. u32(usec(ngx_var.upstream_response_time)) .. u16(status) .. char(failed)))
end

-- rtt_us is ewma.lua's rtt, connect plus response time, in microseconds,
-- at most 2^32 - 1.
local function rtt_us(connect, response)
  return min(connect + response, 4294967295)
end

-- feedback reports the request's attempts to Go: per-peer counts summed
-- locally and sent every flush_interval, with the successful attempts'
-- timings for backends Go scores (ewma); to a Go side without timed counts,
-- the last attempt's timings of a scored backend in a frame of its own (and
-- a failure for each earlier attempt). Either way it rides on the next
-- write.
function _M.feedback(s)
  local name = s and s.backend
  if not name or s.n == 0 then
    return
  end
  local info = state.infos[name]
  local scored = info and info.scored or false
  if scored and not state.timed_counts then
    return done_frames(name)
  end
  local status = ngx.status
  if s.attempt == 1 then
    if not scored then
      if status < 502 then
        -- One attempt, on the first candidate, and a response that is
        -- not nginx's own 502/504: a completion, without reading
        -- $upstream_addr.
        count(name, s.peer, false)
        return
      end
    else
      -- One attempt on the first candidate: it failed if no response
      -- header came back (the variable holds one value unless an internal
      -- redirect added another).
      local header = ngx_var.upstream_header_time
      if header and not find(header, " ", 1, true) and not find(header, ",", 1, true) then
        if header == "-" then
          count(name, s.peer, true, true)
        else
          count(name, s.peer, false, true, rtt_us(usec1(ngx_var.upstream_connect_time), usec1(ngx_var.upstream_response_time)))
        end
        return
      end
    end
  end
  local addrs = ngx_var.upstream_addr
  if not addrs then
    return
  end
  if not find(addrs, ",", 1, true) and not find(addrs, " ", 1, true) then
    -- One attempt. It failed only if no response header came back, and
    -- then nginx answers 502 or 504 itself: for a backend Go does not
    -- score, read the variable only then.
    local failed = false
    if scored or status >= 502 then
      local header = ngx_var.upstream_header_time
      failed = header == "-" or scored and header == nil
    end
    if scored and not failed then
      count(name, addrs, false, true, rtt_us(usec1(ngx_var.upstream_connect_time), usec1(ngx_var.upstream_response_time)))
    else
      count(name, addrs, failed, scored)
    end
    return
  end
  -- Earlier attempts failed (nginx moved on to the next peer).
  local lastpeer = last(addrs)
  each_earlier(addrs, count_failed, name, scored)
  local header = last(ngx_var.upstream_header_time)
  local failed = header == "-" or scored and header == nil
  if scored and not failed then
    count(name, lastpeer, false, true, rtt_us(usec(ngx_var.upstream_connect_time), usec(ngx_var.upstream_response_time)))
  else
    count(name, lastpeer, failed, scored)
  end
end

conn.flushers[#conn.flushers + 1] = flush_counts

return _M
