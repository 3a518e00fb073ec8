-- switchyard.conn: one nginx worker's connection to the Go pick socket. It
-- is held by a timer ("the pump"): a writer loop sends every queued frame in
-- one send, a reader light thread dispatches replies by request id to the
-- requests sleeping on their semaphores (or to the handlers other modules
-- registered for their background asks), and applies generation pushes.
-- In: frames to send (enqueue), asks to wait for (ask). Out: replies,
-- state.connected, state.gen.

local semaphore = require("ngx.semaphore")
local ngx = ngx
local wire = require("switchyard.wire")
local byte = string.byte
local min = math.min
local pairs = pairs
local ngx_now = ngx.now
local log, ERR, NOTICE = ngx.log, ngx.ERR, ngx.NOTICE
local T, TWO32 = wire.T, wire.TWO32
local frame, be32 = wire.frame, wire.be32
local opts = require("switchyard.options")
local state = require("switchyard.state")
local parse_info, parse_pick = wire.parse_info, wire.parse_pick
local VERSION = wire.VERSION

local ok_clear, table_clear = pcall(require, "table.clear")
if not ok_clear then
  table_clear = function(t)
    for k in pairs(t) do
      t[k] = nil
    end
  end
end

local _M = {
  -- handlers: reply type -> function(s, b) returning an error string or
  -- nil, for the replies of other modules' background asks.
  handlers = {},
  -- flushers: functions the writer calls before each write and on its idle
  -- wake-up, to queue aggregated frames.
  flushers = {},
}

local queue, spare = {}, {} -- frames waiting for the writer; double buffer
local nqueue = 0
local waiting = {} -- request id -> slot awaiting the reply
local pool, npool = {}, 0 -- idle slots (each owns a semaphore)
local next_id = 0
local reader_failed = false
local wake = nil -- semaphore the writer sleeps on
local writer_idle = false
local last_logged = {}
_M.waiting = waiting

local function log_once(kind, ...)
  local now = ngx_now()
  local last = last_logged[kind]
  if last and now - last < opts.log_interval then
    return
  end
  last_logged[kind] = now
  log(ERR, "switchyard pick: ", ...)
end

local function enqueue(f)
  if nqueue >= opts.max_queue then
    return false
  end
  nqueue = nqueue + 1
  queue[nqueue] = f
  return true
end

local function kick()
  if writer_idle then
    writer_idle = false
    wake:post(1)
  end
end

local function new_id()
  next_id = next_id + 1
  if next_id > 4294967295 then
    next_id = 1
  end
  return next_id
end

local function get_slot()
  if npool > 0 then
    local s = pool[npool]
    pool[npool] = nil
    npool = npool - 1
    return s
  end
  -- A result holds its candidates either in cands/cookies (Go's pick
  -- reply) or as a rotation: peer list rpeers (rn long) from position rpos,
  -- whose index in the list is ridx (leases and the fallback; no copying).
  -- rinfo is the backend info whose rotation a round-robin request's
  -- retries continue (see candidate), rname its backend's name when that is
  -- not the requested one (a canary routed from a premade decision).
  -- sinfo is the backend info of a new sticky session made in the worker
  -- (tables.new_session): made candidates so far, the rest made for the
  -- retries that need them; setc, whether its cookies are set.
  return { sema = semaphore.new(), cands = {}, cookies = {}, n = 0, attempt = 0,
    rpeers = false, rn = 0, rpos = 0, ridx = 0, peer = false, rinfo = false, recipe = false,
    rname = false, own = false, sinfo = false, made = 0, setc = false }
end

-- release returns a pick result to the pool once its request is done.
function _M.release(s)
  if s and s.sema and not s.pending then
    s.fallback, s.attempt, s.backend, s.alt, s.score = nil, 0, nil, nil, nil
    s.rpeers, s.peer, s.rinfo, s.recipe, s.rname, s.own = false, false, false, false, false, false
    s.sinfo = false
    npool = npool + 1
    pool[npool] = s
  end
end

-- see_gen takes note of a generation in a reply or push: gen only moves
-- forward (uint32, wrapping), so a reply computed before a configuration
-- change and written after its push does not make old data current again.
local function see_gen(g)
  if state.gen == nil then
    state.gen = g
    return
  end
  local d = (g - state.gen) % TWO32
  if d ~= 0 and d < 2147483648 then
    state.gen = g
  end
end

local function dispatch(b)
  -- b: version, type, id, body
  if byte(b, 1) ~= VERSION then
    return "protocol version " .. tostring(byte(b, 1))
  end
  local typ = byte(b, 2)
  if typ == T.GEN then
    -- Go's configuration changed: every info of another generation, and
    -- the decision data on it, is not used to decide a request any more.
    if #b ~= 10 then
      return "bad generation frame"
    end
    see_gen(be32(b, 7))
    return nil
  end
  local id = be32(b, 3)
  local s = waiting[id]
  if not s then
    return nil -- the request gave up waiting
  end
  waiting[id] = nil
  if typ == T.PICK_REPLY then
    parse_pick(s, b, 7)
    see_gen(s.gen)
  elseif typ == T.INFO_REPLY then
    local info = parse_info(b, 7)
    state.connect_section, state.timed_counts = info.connect_section, info.timed_counts
    see_gen(info.gen)
    if s.hello then
      state.tables = info.tables
      if state.tables then
        -- Generations are pushed from now on (TypeGen).
        enqueue(frame(T.SUBSCRIBE, 0, "\0"))
        kick()
      end
      return nil
    end
    local cur = state.infos[s.name]
    if info.unknown then
      state.infos[s.name] = nil
    elseif cur and cur.gen == info.gen then
      -- Another ask got this generation's info first (concurrent
      -- requests, or pick.lua's prefetch of a canary): keep that one, which
      -- may hold a lease, table or premade picks by now; a second object
      -- replacing it lost them (a canary's table gone while Go was down).
      info = cur
    else
      state.infos[s.name] = info
      if state.shared then
        state.shared:set("switchyard:info:" .. s.name, b)
      end
    end
    s.info = info
  else
    local handle = _M.handlers[typ]
    if not handle then
      return "unexpected frame type " .. tostring(typ)
    end
    local err = handle(s, b)
    if err then
      return err
    end
  end
  s.pending = nil
  if s.sema then
    s.sema:post(1)
  end
  return nil
end

-- await waits, at most the pick timeout, for the background ask of kind
-- ("lease", "premade") now on its way for info: its handler, or a lost
-- connection, calls arrived. It reports false when it timed out.
function _M.await(info, kind)
  local w = info[kind .. "_wait"]
  if not w then
    w = { sema = semaphore.new(), n = 0 }
    info[kind .. "_wait"] = w
  end
  w.n = w.n + 1
  local ok = w.sema:wait(opts.timeout)
  if not ok then
    w.n = w.n - 1
  end
  return ok
end

-- take_or_await calls take(s, info, name); when it finds nothing at hand
-- and a background ask of kind is on its way (info[pending]), it waits for
-- that ask's reply and calls take again.
function _M.take_or_await(take, s, info, name, kind, pending)
  if take(s, info, name) then
    return true
  end
  return info[pending] and _M.await(info, kind) and take(s, info, name) or false
end

-- arrived wakes the requests awaiting info's background ask of kind.
local function arrived(info, kind)
  local w = info[kind .. "_wait"]
  if w and w.n > 0 then
    w.sema:post(w.n)
    w.n = 0
  end
end
_M.arrived = arrived

-- fail_waiters wakes every request waiting on the lost connection; they fall
-- back at once instead of waiting out their timeout.
local function fail_waiters()
  for id, s in pairs(waiting) do
    waiting[id] = nil
    s.code = nil
    s.pending = nil
    -- Background asks: the next pick asks again.
    if s.lease then
      s.info.lpending = false
      arrived(s.info, "lease")
    elseif s.table then
      s.info.tpending = false
    elseif s.premade then
      s.info.ppending = false
      arrived(s.info, "premade")
    end
    if s.sema then
      s.sema:post(1)
    end
  end
end

local function reader(sock)
  while true do
    local hdr, err = sock:receive(4)
    if not hdr then
      if err ~= "timeout" then
        if state.connected then
          log_once("read", "reading from ", opts.socket, ": ", err)
        end
        break
      end
    else
      local len = be32(hdr, 1)
      if len < 6 or len > 65536 then
        log_once("frame", "bad frame length ", len)
        break
      end
      local b
      b, err = sock:receive(len)
      if not b then
        log_once("read", "reading from ", opts.socket, ": ", err)
        break
      end
      -- A reply this worker cannot read is a protocol error, as any
      -- malformed frame: the connection goes, and a new one starts over.
      local ok
      ok, err = pcall(dispatch, b)
      if not ok then
        err = "reading a reply: " .. tostring(err)
      end
      if err then
        log_once("frame", err)
        break
      end
    end
  end
  reader_failed = true
  kick()
end

local function writer(sock)
  while true do
    if reader_failed or ngx.worker.exiting() then
      return
    end
    for i = 1, #_M.flushers do
      _M.flushers[i]()
    end
    if nqueue > 0 then
      local q = queue
      queue, spare = spare, queue
      nqueue = 0
      local ok, err = sock:send(q)
      table_clear(q)
      if not ok then
        log_once("write", "writing to ", opts.socket, ": ", err)
        return
      end
    else
      writer_idle = true
      wake:wait(opts.flush_interval)
      writer_idle = false
    end
  end
end

local function pump(premature)
  if premature then
    return
  end
  local backoff = 0.05
  while not ngx.worker.exiting() do
    local sock = ngx.socket.tcp()
    -- An idle connection waits for replies for a long time: a read timeout
    -- would be logged by nginx at every expiry; the writer ends the reader
    -- when the connection must go.
    sock:settimeouts(1000, 1000, 3600000)
    local ok, err = sock:connect(opts.socket)
    if ok then
      if backoff > 0.05 then
        log(NOTICE, "switchyard pick: state.connected to ", opts.socket)
      end
      backoff = 0.05
      state.connected, reader_failed, state.connect_section, state.tables = true, false, false, false
      state.timed_counts = false
      -- Generations are per Go process: the hello's reply gives this one's.
      state.gen = nil
      -- Hello: a backend-info query for no backend, whose flags say
      -- what this Go side takes (older ones answer without bit 2). Its
      -- name asks for routes (picksock.HelloRoutes): a Go side that
      -- knows them sends them with the infos of backends with a canary
      -- (flags bit 6); an older one answers it as an unknown backend.
      local id = new_id()
      if enqueue(frame(T.INFO, id, wire.str8("\0routes"))) then
        waiting[id] = { hello = true, pending = true }
      end
      local rt = ngx.thread.spawn(reader, sock)
      writer(sock)
      state.connected = false
      fail_waiters()
      ngx.thread.kill(rt)
      sock:close()
      -- What was queued for the lost connection is stale: picks whose
      -- requests fell back, and feedback.
      table_clear(queue)
      nqueue = 0
    else
      log_once("connect", "connecting to ", opts.socket, ": ", err)
      ngx.sleep(backoff)
      backoff = min(backoff * 2, 2)
    end
  end
  fail_waiters()
end

-- init_worker starts the pump. Call from init_worker_by_lua.
function _M.init_worker()
  wake = semaphore.new()
  local ok, err = ngx.timer.at(0, pump)
  if not ok then
    log(ERR, "switchyard pick: cannot start the pump: ", err)
  end
end

-- ask enqueues a request frame for slot s and waits for the reply.
local function ask(s, id, f)
  if not state.connected or not enqueue(f) then
    return false
  end
  s.pending, s.code, s.info = true, nil, nil
  waiting[id] = s
  kick()
  local ok = s.sema:wait(opts.timeout)
  if not ok then
    waiting[id] = nil
    s.pending = nil
    return false
  end
  return s.code ~= nil or s.info ~= nil
end

-- BATCH_MIN and BATCH_SPAN size the batches of decisions asked for in the
-- background (leases, premade picks): about BATCH_SPAN seconds of the
-- worker's demand since the last ask, at least BATCH_MIN. Fixed leases of
-- 64, and of 256 refilled at half, ran dry under load before the refill came
-- back, and each pick then took a round trip.
local BATCH_MIN, BATCH_SPAN = 16, 0.04
-- BATCH_SPAN_KEPT is the span of batches used until their generation ends
-- rather than for LEASE_TTL (leases with generation pushes, the draws of a
-- routed backend none of whose sides is scored): nothing in them goes
-- stale, and each ask wakes the sidecar on the cores nginx needs, so they
-- are asked for in fewer, larger batches (issue 16: the canary by weight's
-- sidecar CPU was its wake-ups, docs/benchmarks.md run 16).
local BATCH_SPAN_KEPT = 0.25
_M.BATCH_SPAN_KEPT = BATCH_SPAN_KEPT

-- ask_batch asks Go in the background for a batch of decisions of frame type
-- typ for info's backend, sized to demand (a counter) since last_demand at
-- time last_t, at most max, and reports whether the ask was queued. The
-- reply goes to the type's handler; the waiting entry is marked with kind
-- ("lease", "premade") so a lost connection clears the right pending flag.
-- span is the demand's time a batch covers (BATCH_SPAN when nil).
local function ask_batch(typ, info, name, now, demand, last_t, last_demand, max, kind, span)
  local dt = now - last_t
  if dt < 0.001 then
    dt = 0.001
  end
  local size = math.floor((demand - last_demand) / dt * (span or BATCH_SPAN))
  if size < BATCH_MIN then
    size = BATCH_MIN
  elseif size > max then
    size = max
  end
  local id = new_id()
  if not enqueue(frame(typ, id, wire.str8(name) .. wire.u16(size))) then
    return false
  end
  local w = { name = name, info = info, pending = true }
  w[kind] = true
  waiting[id] = w
  kick()
  return true
end
_M.ask_batch = ask_batch

_M.log_once, _M.enqueue, _M.kick, _M.new_id, _M.get_slot, _M.ask, _M.see_gen = log_once, enqueue, kick, new_id, get_slot, ask, see_gen

return _M
