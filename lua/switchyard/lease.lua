-- switchyard.lease: round-robin leases (docs/pick-protocol.md, 0x04):
-- positions of a backend's shared rotation Go reserved for this worker,
-- handed to its requests one each, and to their retries.
-- In: backend infos. Out: rotation positions.

local ngx = ngx
local wire = require("switchyard.wire")
local byte = string.byte
local ngx_now = ngx.now
local T, TWO32 = wire.T, wire.TWO32
local be32 = wire.be32
local state = require("switchyard.state")
local conn = require("switchyard.conn")
-- A lease reserves about 40 ms of this worker's round-robin picks of a
-- backend (conn.ask_batch), at most LEASE_MAX positions (the protocol's
-- bound).
local LEASE_MAX = 1024
-- LEASE_TTL bounds how long a lease is used, in seconds: endpoint changes
-- reach a worker within it even with no other reply in between. Under load a
-- lease is used up in milliseconds anyway.
local LEASE_TTL = 0.1

local _M = {}

-- request_lease asks Go for the backend's next lease, sized to about 40 ms
-- of this worker's picks of it since the last request.
local function request_lease(info, name, now)
  -- With generation pushes a lease is used up, never dropped: a larger one.
  local span = state.tables and conn.BATCH_SPAN_KEPT or nil
  if conn.ask_batch(T.LEASE, info, name, now, info.demand, info.lreq_t, info.lreq_demand, LEASE_MAX, "lease", span) then
    info.lpending = true
  end
  info.lreq_t, info.lreq_demand = now, info.demand
end

-- lease_next takes the next position of the backend's lease: the next
-- rotation position Go reserved for this worker. It returns the position
-- and its index in info.peers, or nil when the worker holds no lease.
-- The next lease is asked for as soon as the current one starts being
-- used, so one is in reserve while this one lasts. If the current one runs
-- out (or expires) before the next arrives, the rotation continues past its
-- end: the positions Go hands out next, rather than a round trip per
-- request that would wait for the same slow Go side.
function _M.next(info, name)
  local now = ngx_now()
  info.demand = info.demand + 1
  local left = info.lleft
  -- With generation pushes (state.tables: this connection subscribed), a
  -- lease is good until its info is of an old generation, which pick.lua
  -- checks before the lease is reached: its positions are used up, not
  -- dropped after LEASE_TTL. Dropping them cost the round robin its order
  -- at low rates: each request further than LEASE_TTL from the last took
  -- the first position of a fresh lease, whose length is often a multiple
  -- of the peers (8 of 11 repeats over 12 requests 150 ms apart,
  -- TestShimTables). Without pushes, LEASE_TTL bounds how long endpoint
  -- changes take to reach the worker.
  local ttl = not state.tables
  local expired = ttl and now - info.lt >= LEASE_TTL
  if left == 0 or expired then
    left = 0
    local start = info.nstart
    if start and (not ttl or now - info.nt < LEASE_TTL) then
      -- Positions start+1 .. start+count (uint32).
      start = start + 1 < TWO32 and start + 1 or 0
      info.lpos, info.lidx, left, info.lt, info.leased = start, start % info.npeers, info.ncount, info.nt, true
    end
    info.nstart = nil
    if not info.lpending then
      request_lease(info, name, now)
    end
    info.lleft = left
    -- Continue past the end only of a lease used up within LEASE_TTL: an
    -- expired one may predate a configuration change.
    if left == 0 and (expired or not (info.lpending and info.leased)) then
      return nil
    end
  end
  if left > 0 then
    info.lleft = left - 1
  end
  local pos, idx, np = info.lpos, info.lidx, info.npeers
  -- The next position and its index in the peer list, counted as Go does
  -- (uint32 positions: the index restarts when the position wraps).
  if pos == TWO32 - 1 then
    info.lpos, info.lidx = 0, 0
  else
    local nidx = idx + 1
    info.lpos, info.lidx = pos + 1, nidx < np and nidx or 0
  end
  return pos, idx
end

-- take_leased fills s from the backend's lease (lease_next).
function _M.take(s, info, name)
  local pos, idx = _M.next(info, name)
  if not pos then
    return false
  end
  local np = info.npeers
  s.rpeers, s.rn, s.rpos, s.ridx, s.rinfo = info.peers, np, pos, idx, info
  s.n, s.code, s.alt, s.score, s.backend = np < 3 and np or 3, 0, false, nil, name
  return true
end

-- take_wait is take, but when no lease is at hand and one is on its way
-- (take asks for it), it waits for that lease rather than reporting false:
-- for a backend whose requests must not take positions of its rotation out
-- of the worker's order (a pick Go makes for the request would).
function _M.take_wait(s, info, name)
  return conn.take_or_await(_M.take, s, info, name, "lease", "lpending")
end

conn.handlers[T.LEASE_REPLY] = function(s, b)
  local info = s.info
  info.lpending = false
  local code, lgen = byte(b, 7), be32(b, 8)
  conn.see_gen(lgen)
  if code == 0 and lgen == info.gen then
    local start, count, n = be32(b, 12), byte(b, 16) * 256 + byte(b, 17), byte(b, 18) * 256 + byte(b, 19)
    if n == info.npeers and n > 0 and count > 0 then
      info.nstart, info.ncount, info.nt = start, count, ngx_now()
    end
  end
  conn.arrived(info, "lease")
  return nil
end

return _M
