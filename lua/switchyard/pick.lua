-- switchyard.pick: one nginx worker's client of the Go pick socket
-- (docs/pick-protocol.md). It owns one persistent unix-socket connection per
-- worker, held by a timer ("the pump"): a writer loop sends every queued frame
-- in one send, a reader light thread dispatches replies by request id to the
-- requests sleeping on their semaphores. Requests only enqueue and wait.
--
-- In: backend names and nginx variables from the rewrite phase, completion
-- data from the log phase. Out: ordered candidate peers, the backend actually
-- used, Set-Cookie values, the EWMA score. No balancing logic lives here; when
-- Go cannot answer in time, it cycles through the last peer list Go gave for
-- the backend.

local ngx = ngx
local semaphore = require("ngx.semaphore")
local bit = require("bit")
local ffi = require("ffi")

local byte, char, sub, find, match = string.byte, string.char, string.sub, string.find, string.match
local band, rshift = bit.band, bit.rshift
local floor, min, random = math.floor, math.min, math.random
local tonumber, type, pairs = tonumber, type, pairs
local ngx_var = ngx.var
local ngx_now = ngx.now
local log, ERR, WARN, NOTICE = ngx.log, ngx.ERR, ngx.WARN, ngx.NOTICE

local ok_clear, table_clear = pcall(require, "table.clear")
if not ok_clear then
  table_clear = function(t)
    for k in pairs(t) do
      t[k] = nil
    end
  end
end

local _M = {
  -- socket is the Go pick socket ("unix:/path").
  socket = "unix:/var/run/switchyard/pick.sock",
  -- timeout is how long a request waits for Go's answer, in seconds, before
  -- it falls back to the last peer list.
  timeout = 0.05,
  -- flush_interval bounds how long feedback waits for a pick to ride on.
  flush_interval = 0.1,
  -- max_queue bounds frames waiting to be written; beyond it feedback is
  -- dropped and picks fall back.
  max_queue = 10000,
  -- log_interval: each kind of trouble is logged at most once per interval.
  log_interval = 10,
  -- request_metrics: aggregate ingress-nginx's request metrics (count and
  -- duration histogram per host/status/method/path/namespace/ingress/
  -- service/canary, and the upstream connect times: count, sum and a
  -- sample) and send them to Go every flush_interval. Switchyard's own
  -- nginx.conf turns it on; in an ingress-nginx pod its monitor.lua does
  -- this job.
  request_metrics = false,
  -- metrics_per_host: label request metrics with $server_name.
  metrics_per_host = true,
}

local VERSION = 1
local T_PICK, T_DONE, T_INFO, T_LEASE, T_COUNTS, T_REQUESTS = 1, 2, 3, 4, 5, 6
local T_SUBSCRIBE, T_TABLE, T_PREMADE = 7, 8, 9
local T_PICK_REPLY, T_INFO_REPLY, T_LEASE_REPLY = 0x81, 0x83, 0x84
local T_GEN, T_TABLE_REPLY, T_PREMADE_REPLY = 0x87, 0x88, 0x89
-- PREMADE_MAX bounds the premade picks asked for at once (the protocol's
-- MaxPremade); STRIDE is the room for each premade pick's candidates in the
-- flat candidate array (the protocol's MaxCandidates).
local PREMADE_MAX, STRIDE = 1024, 8
-- A lease reserves about LEASE_SPAN seconds of this worker's round-robin
-- picks of a backend, LEASE_MIN to LEASE_MAX positions (the protocol's
-- bound). Fixed leases of 64, and of 256 refilled at half, ran dry under load
-- before the refill came back, and each pick then took a round trip.
local LEASE_MIN, LEASE_MAX, LEASE_SPAN = 16, 1024, 0.04
-- LEASE_TTL bounds how long a lease is used, in seconds: endpoint changes
-- reach a worker within it even with no other reply in between. Under load a
-- lease is used up in milliseconds anyway.
local LEASE_TTL = 0.1
local TWO32 = 4294967296
local CODE_UNKNOWN = 1
-- The IEEE 754 bits of -1.0, "not scored", as sent big-endian.
local NO_SCORE = "\191\240\0\0\0\0\0\0"

local function u16(n)
  return char(band(rshift(n, 8), 255), band(n, 255))
end

local function u32(n)
  return char(band(rshift(n, 24), 255), band(rshift(n, 16), 255), band(rshift(n, 8), 255), band(n, 255))
end

local function str8(s)
  if #s > 255 then
    s = sub(s, 1, 255)
  end
  return char(#s) .. s
end

local function str16(s)
  if #s > 65535 then
    s = sub(s, 1, 65535)
  end
  return u16(#s) .. s
end

local function frame(typ, id, body)
  return u32(6 + #body) .. char(VERSION, typ) .. u32(id) .. body
end

-- Per-worker state. Everything runs on the worker's one thread, so no locks.
local queue, spare = {}, {} -- frames waiting for the writer; double buffer
local nqueue = 0
local waiting = {} -- request id -> slot awaiting the reply
local pool, npool = {}, 0 -- idle slots (each owns a semaphore)
local next_id = 0
local connected = false
local reader_failed = false
local wake = nil -- semaphore the writer sleeps on
local writer_idle = false
-- connect_section: the Go side of this connection takes requests frames
-- with a connect-time section (bit 2 of its backend-info flags); learned
-- from the hello the pump sends on every new connection.
local connect_section = false
-- tables: the Go side of this connection takes subscribe, table and premade
-- frames (bit 3 of its backend-info flags), learned from the hello.
local tables = false
local infos = {} -- backend -> info {gen, vars, peers, npeers, rr, ...}
-- shared keeps the last backend-info and table frames any worker got, in
-- ingress-nginx's configuration_data dict (every nginx.conf of it declares
-- one), so a worker that never heard of a backend while Go was up (a new
-- worker after a reload, or one that got no request for it) can still
-- serve it while Go is down, with the same tables.
local shared = ngx.shared and ngx.shared.configuration_data
-- gen is the generation of Go's configuration in the last reply read (nil
-- before any). An info of another generation is not used to decide a
-- request: the next one asks for a fresh one and waits (get_info).
local gen = nil
local see_gen, load_table, load_premade, should_set_cookie, sticky_cookie, shared_info
-- counts aggregates completions of backends Go does not score:
-- backend -> peer -> {completed, failed}; flushed every flush_interval.
local counts = {}
local counts_dirty = false
local last_flush = 0
local last_logged = {}

local function log_once(kind, ...)
  local now = ngx_now()
  local last = last_logged[kind]
  if last and now - last < _M.log_interval then
    return
  end
  last_logged[kind] = now
  log(ERR, "switchyard pick: ", ...)
end

local function enqueue(f)
  if nqueue >= _M.max_queue then
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
  -- retries continue (see candidate).
  return { sema = semaphore.new(), cands = {}, cookies = {}, n = 0, attempt = 0,
    rpeers = false, rn = 0, rpos = 0, ridx = 0, peer = false, rinfo = false }
end

-- release returns a pick result to the pool once its request is done.
function _M.release(s)
  if s and s.sema and not s.pending then
    s.fallback, s.attempt, s.backend, s.alt, s.score = nil, 0, nil, nil, nil
    s.rpeers, s.peer, s.rinfo = false, false, false
    npool = npool + 1
    pool[npool] = s
  end
end

local dbl = ffi.new("double[1]")
local dbl_bytes = ffi.cast("uint8_t*", dbl)
local crc32 = ngx.crc32_long
local uint32_array, uint16_array = ffi.typeof("uint32_t[?]"), ffi.typeof("uint16_t[?]")
local function f64(s, i)
  -- Big-endian on the wire; x86 and arm64 are little-endian.
  for k = 0, 7 do
    dbl_bytes[k] = byte(s, i + 7 - k)
  end
  return dbl[0]
end

-- Reply parsing. b is the frame after its 4-byte length.
local function be32(b, i)
  local b1, b2, b3, b4 = byte(b, i, i + 3)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end

local function parse_info(b, i)
  local info = { vars = {}, nvars = 0, peers = {}, npeers = 0, rr = 0,
    -- Lease state: the lease in use (next position and its index in
    -- peers, positions left, when it arrived), the one in reserve (nstart,
    -- ncount, nt), whether one is asked for, whether any was used, and the
    -- picks counted for sizing the next.
    lpos = 0, lidx = 0, lleft = 0, lt = 0, lpending = false, leased = false, demand = 0, lreq_t = 0,
    lreq_demand = 0,
    -- Premade picks: the batch in use and the one in reserve (pcur, pnext,
    -- set when they come), whether one is asked for or Go said there are
    -- none, and the eligible picks counted for sizing the next.
    ppending = false, pfailed = false, pdemand = 0, preq_t = 0, preq_demand = 0,
    -- Hash table: whole (ring) or being fetched (tpending, tloaded points),
    -- or refused (tfailed).
    ring = false, tpending = false, tfailed = false }
  local code = byte(b, i)
  info.gen = be32(b, i + 1)
  info.leasable = band(byte(b, i + 5), 1) == 1
  info.scored = band(byte(b, i + 5), 2) == 2
  info.connect_section = band(byte(b, i + 5), 4) == 4
  info.tables = band(byte(b, i + 5), 8) == 8
  info.hashtable = band(byte(b, i + 5), 16) == 16
  info.premade = band(byte(b, i + 5), 32) == 32
  i = i + 6
  local nv = byte(b, i)
  i = i + 1
  for k = 1, nv do
    local l = byte(b, i)
    local name = sub(b, i + 1, i + l)
    i = i + 1 + l
    -- $1 .. $9 of a hash key are regex captures: ngx.var[1].
    info.vars[k] = tonumber(name) or name
    info.names = info.names or {}
    info.names[k] = str8(name)
  end
  info.nvars = nv
  local np = byte(b, i) * 256 + byte(b, i + 1)
  i = i + 2
  for k = 1, np do
    local l = byte(b, i)
    info.peers[k] = sub(b, i + 1, i + l)
    i = i + 1 + l
  end
  info.npeers = np
  info.unknown = code == CODE_UNKNOWN
  return info
end

local function parse_pick(s, b, i)
  s.code = byte(b, i)
  s.alt = byte(b, i + 1) == 1
  s.gen = be32(b, i + 2)
  i = i + 6
  local l = byte(b, i)
  s.backend = sub(b, i + 1, i + l)
  i = i + 1 + l
  local raw = sub(b, i, i + 7)
  if raw == NO_SCORE then
    s.score = nil
  else
    s.score = f64(b, i)
  end
  i = i + 8
  local n = byte(b, i)
  i = i + 1
  local cands, cookies = s.cands, s.cookies
  for k = 1, n do
    l = byte(b, i)
    cands[k] = sub(b, i + 1, i + l)
    i = i + 1 + l
    l = byte(b, i) * 256 + byte(b, i + 1)
    if l == 0 then
      cookies[k] = false
    else
      cookies[k] = sub(b, i + 2, i + 1 + l)
    end
    i = i + 2 + l
  end
  s.n = n
end

-- see_gen takes note of a generation in a reply or push: gen only moves
-- forward (uint32, wrapping), so a reply computed before a configuration
-- change and written after its push does not make old data current again.
function see_gen(g)
  if gen == nil then
    gen = g
    return
  end
  local d = (g - gen) % TWO32
  if d ~= 0 and d < 2147483648 then
    gen = g
  end
end

-- request_table asks for the chunk of a backend's hash table from point
-- offset (a background ask: no request waits for it).
local function request_table(info, name, offset)
  local id = new_id()
  if enqueue(frame(T_TABLE, id, str8(name) .. u32(offset))) then
    info.tpending = true
    waiting[id] = { name = name, info = info, pending = true, table = true }
    kick()
  end
end

-- parse_recipe reads a sticky table's cookie recipe from position i and
-- returns it and the position after it.
local function parse_recipe(b, i, name)
  local r = { name = name }
  local l = byte(b, i)
  r.bkey = sub(b, i + 1, i + l)
  i = i + 1 + l
  local flags = byte(b, i)
  r.has_expires, r.secure, r.cond_none = band(flags, 1) == 1, band(flags, 2) == 2, band(flags, 4) == 4
  local hi, lo = be32(b, i + 1), be32(b, i + 5)
  if hi >= 2147483648 then
    hi = hi - TWO32 -- a negative expires
  end
  r.expires = hi * TWO32 + lo
  i = i + 9
  l = byte(b, i)
  r.maxage = sub(b, i + 1, i + l)
  i = i + 1 + l
  l = byte(b, i) * 256 + byte(b, i + 1)
  r.domain = sub(b, i + 2, i + 1 + l)
  i = i + 2 + l
  l = byte(b, i) * 256 + byte(b, i + 1)
  r.path = sub(b, i + 2, i + 1 + l)
  i = i + 2 + l
  l = byte(b, i)
  r.samesite = sub(b, i + 1, i + l)
  i = i + 1 + l
  local nh = byte(b, i) * 256 + byte(b, i + 1)
  i = i + 2
  if nh > 0 then
    -- host -> set of Ingress paths; "*.suffix" hosts also by suffix.
    r.locations, r.wlocations = {}, {}
  end
  for _ = 1, nh do
    l = byte(b, i) * 256 + byte(b, i + 1)
    local host = sub(b, i + 2, i + 1 + l)
    i = i + 2 + l
    local np = byte(b, i) * 256 + byte(b, i + 1)
    i = i + 2
    local paths = {}
    for _ = 1, np do
      l = byte(b, i) * 256 + byte(b, i + 1)
      paths[sub(b, i + 2, i + 1 + l)] = true
      i = i + 2 + l
    end
    r.locations[host] = paths
    if sub(host, 1, 2) == "*." then
      r.wlocations[sub(host, 3)] = paths
    end
  end
  return r, i
end

-- load_table stores one chunk of a hash table reply in info: the key
-- template, then the points in FFI arrays, asking for the next chunk until
-- the table is whole (info.ring). A table of another generation than info,
-- or that does not fit info's peer list, is dropped, and the backend's
-- picks keep asking Go (info.tfailed). A reply that contradicts itself is a
-- protocol error.
function load_table(info, name, b, from_shared)
  info.tpending = false
  local code, tgen = byte(b, 7), be32(b, 8)
  if code ~= 0 or tgen ~= info.gen or infos[name] ~= info then
    info.tfailed = true
    return nil
  end
  local kind = byte(b, 12)
  local i = 13
  local nk = byte(b, i)
  i = i + 1
  local key, keyvar = {}, {}
  for k = 1, nk do
    local kind, l = byte(b, i), byte(b, i + 1) * 256 + byte(b, i + 2)
    local text = sub(b, i + 3, i + 2 + l)
    i = i + 3 + l
    keyvar[k] = kind == 1
    -- $1 .. $9 of a hash key are regex captures: ngx.var[1].
    key[k] = kind == 1 and (tonumber(text) or text) or text
  end
  local npeers = byte(b, i) * 256 + byte(b, i + 1)
  local total, offset, n = be32(b, i + 2), be32(b, i + 6), byte(b, i + 10) * 256 + byte(b, i + 11)
  i = i + 12
  local tail = #b - (i - 1 + 6 * n)
  -- Kinds: 1 chash, 2 sticky_balanced (the cookie recipe follows), 3
  -- sticky_persistent (peer keys and the recipe follow, no points), 4
  -- chashsubset (subsets follow).
  if kind < 1 or kind > 4 or (kind ~= 1) ~= (tail > 0) or tail < 0 or (total == 0) ~= (kind == 3)
      or ((kind == 2 or kind == 3) and nk ~= 1) then
    return "bad table frame"
  end
  if npeers ~= info.npeers then
    info.tfailed = true
    return nil
  end
  if offset == 0 then
    info.thashes, info.towners, info.ttotal, info.tloaded = uint32_array(total), uint16_array(total), total, 0
  end
  if offset ~= info.tloaded or total ~= info.ttotal or offset + n > total then
    return "table chunk out of order"
  end
  local hashes, owners = info.thashes, info.towners
  for k = offset, offset + n - 1 do
    local b1, b2, b3, b4, o1, o2 = byte(b, i, i + 5)
    local o = o1 * 256 + o2
    if o >= npeers then
      return "table owner out of range"
    end
    hashes[k] = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    owners[k] = o
    i = i + 6
  end
  info.tloaded = offset + n
  if shared and not from_shared then
    shared:set("switchyard:table:" .. name .. ":" .. offset, b)
  end
  if kind == 3 then
    -- sticky_persistent: the upstream key of each peer.
    local np = byte(b, i) * 256 + byte(b, i + 1)
    if np ~= npeers then
      return "bad table frame"
    end
    i = i + 2
    local pkeys = {}
    for k = 1, np do
      local l = byte(b, i)
      pkeys[sub(b, i + 1, i + l)] = k
      i = i + 1 + l
    end
    info.pkeys = pkeys
  end
  if kind == 2 or kind == 3 then
    local r
    r, i = parse_recipe(b, i, key[1])
    if i ~= #b + 1 then
      return "bad cookie recipe"
    end
    info.recipe = r
  elseif kind == 4 then
    -- chashsubset: the members of each subset, as peers.
    local ns, size = byte(b, i) * 256 + byte(b, i + 1), byte(b, i + 2)
    if tail ~= 3 + 2 * ns * size or size == 0 then
      return "bad table frame"
    end
    local j = i + 3
    local subsets = {}
    for k = 1, ns do
      local set = {}
      for m = 1, size do
        local p = byte(b, j) * 256 + byte(b, j + 1)
        if p >= npeers then
          return "table member out of range"
        end
        set[m] = info.peers[p + 1]
        j = j + 2
      end
      subsets[k] = set
    end
    info.subsets, info.subset_size = subsets, size
  end
  if info.tloaded < total then
    if n == 0 then
      return "empty table chunk"
    end
    if not from_shared then
      request_table(info, name, info.tloaded)
    end
    return nil
  end
  info.key, info.keyvar, info.nkey = key, keyvar, nk
  info.tkind, info.cookie = kind, key[1]
  info.ring = true
  return nil
end

-- load_premade stores a premade reply's picks in info's reserve batch
-- (info.pnext), flat: per pick whether it went to the canary, its backend,
-- its score, and its candidates at (k-1)*STRIDE+1 ... Batches are reused.
function load_premade(info, name, b)
  info.ppending = false
  local code, pgen = byte(b, 7), be32(b, 8)
  if code ~= 0 or pgen ~= info.gen or infos[name] ~= info then
    if code ~= 0 then
      info.pfailed = true
    end
    return nil
  end
  local n = byte(b, 12) * 256 + byte(b, 13)
  local batch = info.pnext
  if not batch then
    batch = { n = 0, i = 1, t = 0, alt = {}, backend = {}, score = {}, nc = {}, c = {}, keys = {} }
    info.pnext = batch
  end
  local alt, backend, score, ncs, c, keys = batch.alt, batch.backend, batch.score, batch.nc, batch.c, batch.keys
  local i, len = 14, #b
  for k = 1, n do
    if i + 11 > len then
      return "bad premade frame"
    end
    local flags = byte(b, i)
    alt[k] = band(flags, 1) == 1
    local keyed = band(flags, 2) == 2
    local l = byte(b, i + 1)
    backend[k] = sub(b, i + 2, i + 1 + l)
    i = i + 2 + l
    if sub(b, i, i + 7) == NO_SCORE then
      score[k] = false
    else
      score[k] = f64(b, i)
    end
    local nc = byte(b, i + 8)
    i = i + 9
    if nc == 0 or nc > STRIDE then
      return "bad premade candidates"
    end
    ncs[k] = nc
    local base = (k - 1) * STRIDE
    for j = 1, nc do
      l = byte(b, i)
      c[base + j] = sub(b, i + 1, i + l)
      i = i + 1 + l
      if keyed then
        -- A sticky new session: the upstream key of this candidate's
        -- cookie, which the shim writes (sticky_cookie).
        l = byte(b, i)
        keys[base + j] = sub(b, i + 1, i + l)
        i = i + 1 + l
      else
        keys[base + j] = false
      end
    end
  end
  if i ~= len + 1 then
    return "bad premade frame"
  end
  batch.n, batch.i, batch.t = n, 1, ngx_now()
  return nil
end

local function dispatch(b)
  -- b: version, type, id, body
  if byte(b, 1) ~= VERSION then
    return "protocol version " .. tostring(byte(b, 1))
  end
  local typ = byte(b, 2)
  if typ == T_GEN then
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
  if typ == T_PICK_REPLY then
    parse_pick(s, b, 7)
    see_gen(s.gen)
  elseif typ == T_LEASE_REPLY then
    local info = s.info
    info.lpending = false
    local code, lgen = byte(b, 7), be32(b, 8)
    see_gen(lgen)
    if code == 0 and lgen == info.gen then
      local start, count, n = be32(b, 12), byte(b, 16) * 256 + byte(b, 17), byte(b, 18) * 256 + byte(b, 19)
      if n == info.npeers and n > 0 and count > 0 then
        info.nstart, info.ncount, info.nt = start, count, ngx_now()
      end
    end
  elseif typ == T_INFO_REPLY then
    local info = parse_info(b, 7)
    connect_section = info.connect_section
    see_gen(info.gen)
    if s.hello then
      tables = info.tables
      if tables then
        -- Generations are pushed from now on (TypeGen).
        enqueue(frame(T_SUBSCRIBE, 0, "\0"))
        kick()
      end
      return nil
    end
    if info.unknown then
      infos[s.name] = nil
    else
      infos[s.name] = info
      if shared then
        shared:set("switchyard:info:" .. s.name, b)
      end
    end
    s.info = info
  elseif typ == T_TABLE_REPLY then
    local err = load_table(s.info, s.name, b)
    if err then
      return err
    end
  elseif typ == T_PREMADE_REPLY then
    local err = load_premade(s.info, s.name, b)
    if err then
      return err
    end
  else
    return "unexpected frame type " .. tostring(typ)
  end
  s.pending = nil
  if s.sema then
    s.sema:post(1)
  end
  return nil
end

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
    elseif s.table then
      s.info.tpending = false
    elseif s.premade then
      s.info.ppending = false
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
        if connected then
          log_once("read", "reading from ", _M.socket, ": ", err)
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
        log_once("read", "reading from ", _M.socket, ": ", err)
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

local function flush_counts()
  local now = ngx_now()
  if (not counts_dirty and not requests_dirty) or now - last_flush < _M.flush_interval then
    return
  end
  last_flush = now
  local c = counts
  counts, counts_dirty = {}, false
  for backend, peers in pairs(c) do
    local b8 = str8(backend)
    for peer, n in pairs(peers) do
      enqueue(frame(T_COUNTS, 0, b8 .. str8(peer) .. u32(n[1]) .. u32(n[2])))
    end
  end
  local r = requests
  requests, requests_dirty = {}, false
  for key, m in pairs(r) do
    local parts = { "\0", str16(key), u32(m[1]), u32(floor(m[2] / TWO32)), u32(m[2] % TWO32), char(NB + 1) }
    for k = 1, NB + 1 do
      parts[#parts + 1] = u32(m[2 + k])
    end
    local cn = m[C_COUNT]
    if cn > 0 and connect_section then
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
    enqueue(frame(T_REQUESTS, 0, table.concat(parts)))
  end
end

local METHODS = { GET = "GET", HEAD = "HEAD", POST = "POST", PUT = "PUT", DELETE = "DELETE", PATCH = "PATCH",
  OPTIONS = "OPTIONS", CONNECT = "CONNECT", TRACE = "TRACE" }

-- observe_request counts the request in its label set (log phase). Label
-- values come from the configuration ($server_name, the location's
-- variables) or small fixed sets (status, method), never raw request data.
function _M.observe_request()
  local host = ""
  if _M.metrics_per_host then
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

local function writer(sock)
  while true do
    if reader_failed or ngx.worker.exiting() then
      return
    end
    flush_counts()
    if nqueue > 0 then
      local q = queue
      queue, spare = spare, queue
      nqueue = 0
      local ok, err = sock:send(q)
      table_clear(q)
      if not ok then
        log_once("write", "writing to ", _M.socket, ": ", err)
        return
      end
    else
      writer_idle = true
      wake:wait(_M.flush_interval)
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
    local ok, err = sock:connect(_M.socket)
    if ok then
      if backoff > 0.05 then
        log(NOTICE, "switchyard pick: connected to ", _M.socket)
      end
      backoff = 0.05
      connected, reader_failed, connect_section, tables = true, false, false, false
      -- Generations are per Go process: the hello's reply gives this one's.
      gen = nil
      -- Hello: a backend-info query for no backend, whose flags say
      -- what this Go side takes (older ones answer without bit 2).
      local id = new_id()
      if enqueue(frame(T_INFO, id, "\0")) then
        waiting[id] = { hello = true, pending = true }
      end
      local rt = ngx.thread.spawn(reader, sock)
      writer(sock)
      connected = false
      fail_waiters()
      ngx.thread.kill(rt)
      sock:close()
      -- What was queued for the lost connection is stale: picks whose
      -- requests fell back, and feedback.
      table_clear(queue)
      nqueue = 0
    else
      log_once("connect", "connecting to ", _M.socket, ": ", err)
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
  if not connected or not enqueue(f) then
    return false
  end
  s.pending, s.code, s.info = true, nil, nil
  waiting[id] = s
  kick()
  local ok = s.sema:wait(_M.timeout)
  if not ok then
    waiting[id] = nil
    s.pending = nil
    return false
  end
  return s.code ~= nil or s.info ~= nil
end

-- shared_info returns the backend info (and table) another worker got, from
-- the shared dict, or nil; for a worker that has none while Go is away.
function shared_info(name)
  local b = shared and shared:get("switchyard:info:" .. name)
  if not b then
    return nil
  end
  local ok, info = pcall(parse_info, b, 7)
  if not ok or info.unknown then
    return nil
  end
  infos[name] = info
  if info.hashtable then
    local offset = 0
    while true do
      local chunk = shared:get("switchyard:table:" .. name .. ":" .. offset)
      if not chunk then
        break
      end
      local lok, err = pcall(load_table, info, name, chunk, true)
      if not lok or err or info.ring or info.tloaded == offset then
        break
      end
      offset = info.tloaded
    end
    if not info.ring then
      info.tfailed = false
    end
  end
  log_once("shared", "Go side unreachable; backend ", name, " served from what another worker had")
  return info
end

-- info returns what Go said about a backend (variables, fallback peers),
-- asking Go and waiting when this worker has never heard of it, or when
-- its info is of another generation than Go's last reply: a request is
-- never decided on the variables, lease or peers of an old configuration
-- (TestShimDecisions). Only when Go cannot answer is the old info used,
-- for the fallback round robin over its peers.
local function get_info(name)
  local info = infos[name]
  if info and (info.gen == gen or not connected) then
    return info
  end
  if not info and not connected then
    return shared_info(name)
  end
  local s = get_slot()
  s.name, s.info = name, nil
  local id = new_id()
  if not ask(s, id, frame(T_INFO, id, str8(name))) then
    _M.release(s)
    return info
  end
  info = s.info
  s.info = nil
  _M.release(s)
  if info.unknown then
    return false
  end
  return info
end

-- request_lease asks Go for the backend's next lease, sized to about
-- LEASE_SPAN seconds of this worker's picks of it since the last request.
local function request_lease(info, name, now)
  local dt = now - info.lreq_t
  if dt < 0.001 then
    dt = 0.001
  end
  local size = floor((info.demand - info.lreq_demand) / dt * LEASE_SPAN)
  if size < LEASE_MIN then
    size = LEASE_MIN
  elseif size > LEASE_MAX then
    size = LEASE_MAX
  end
  info.lreq_t, info.lreq_demand = now, info.demand
  local id = new_id()
  if enqueue(frame(T_LEASE, id, str8(name) .. u16(size))) then
    info.lpending = true
    waiting[id] = { name = name, info = info, pending = true, lease = true }
    kick()
  end
end

-- lease_next takes the next position of the backend's lease: the next
-- rotation position Go reserved for this worker. It returns the position
-- and its index in info.peers, or nil when the worker holds no lease.
-- The next lease is asked for as soon as the current one starts being
-- used, so one is in reserve while this one lasts. If the current one runs
-- out (or expires) before the next arrives, the rotation continues past its
-- end: the positions Go hands out next, rather than a round trip per
-- request that would wait for the same slow Go side.
local function lease_next(info, name)
  local now = ngx_now()
  info.demand = info.demand + 1
  local left = info.lleft
  local expired = now - info.lt >= LEASE_TTL
  if left == 0 or expired then
    left = 0
    local start = info.nstart
    if start and now - info.nt < LEASE_TTL then
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
local function take_leased(s, info, name)
  local pos, idx = lease_next(info, name)
  if not pos then
    return false
  end
  local np = info.npeers
  s.rpeers, s.rn, s.rpos, s.ridx, s.rinfo = info.peers, np, pos, idx, info
  s.n, s.code, s.alt, s.score, s.backend = np < 3 and np or 3, 0, false, nil, name
  return true
end

-- ring_pick fills s from the backend's hash table (info.ring): the peer
-- owning CRC32 of the key, for every attempt, as Go's chash picks it
-- (TestHashTableEqualsPick in Go; TestShimTables through nginx).
local keybuf = {}

-- cookie_value returns the value of cookie name in a Cookie header, parsed
-- as lua-resty-cookie parses it (Go's balancer.CookieValue): leading spaces
-- and tabs skipped, the key runs to "=", the value to the first ";", space
-- or tab; the last occurrence wins; a segment without "=" merges into the
-- next key.
local function cookie_value(header, name)
  local value
  local j, len = 1, #header
  while true do
    while j <= len do
      local c = byte(header, j)
      if c ~= 32 and c ~= 9 then
        break
      end
      j = j + 1
    end
    local eq = find(header, "=", j, true)
    if not eq then
      return value
    end
    local is_name = eq - j == #name and sub(header, j, eq - 1) == name
    local e = find(header, "[; \t]", eq + 1)
    if not e then
      if is_name then
        return sub(header, eq + 1)
      end
      return value
    end
    if is_name then
      value = sub(header, eq + 1, e - 1)
    end
    j = e + 1
  end
end

-- ring_pick fills s from the backend's table (info.ring) and returns it, or
-- returns nil when the table does not decide the request: a sticky request
-- without a cookie naming a peer is a new session, whose peer and cookie Go
-- chooses.
local function ring_pick(s, info, name)
  local key
  local nk, kparts, kvar = info.nkey, info.key, info.keyvar
  local kind = info.tkind
  if kind == 2 or kind == 3 then
    -- sticky: the upstream key is the first piece of the cookie's value.
    local header = ngx_var.http_cookie
    local v = header and cookie_value(header, info.cookie)
    key = v and match(v, "[^|]+")
    if not key then
      return nil
    end
    if kind == 3 then
      local k = info.pkeys[key]
      if not k then
        return nil
      end
      s.cands[1], s.cookies[1] = info.peers[k], false
      s.n, s.code, s.alt, s.score, s.backend = 1, 0, false, nil, name
      return s
    end
  elseif nk == 1 and kvar[1] then
    key = ngx_var[kparts[1]] or ""
  else
    local m = 0
    for k = 1, nk do
      local v = kparts[k]
      if kvar[k] then
        v = ngx_var[v]
      end
      if v then
        m = m + 1
        keybuf[m] = v
      end
    end
    key = table.concat(keybuf, "", 1, m)
  end
  local h = crc32(key)
  local hashes, total = info.thashes, info.ttotal
  local lo, hi = 0, total
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if hashes[mid] < h then
      lo = mid + 1
    else
      hi = mid
    end
  end
  if lo == total then
    lo = 0
  end
  if kind == 4 then
    -- chashsubset: the key's subset is Go's; each attempt gets a member
    -- drawn uniformly from it, as Go's pick draws one per attempt.
    local set, size = info.subsets[info.towners[lo] + 1], info.subset_size
    if not set then
      return nil
    end
    local cands, cookies = s.cands, s.cookies
    for k = 1, 3 do
      cands[k], cookies[k] = set[random(size)], false
    end
    s.n, s.code, s.alt, s.score, s.backend = 3, 0, false, nil, name
    return s
  end
  s.cands[1], s.cookies[1] = info.peers[info.towners[lo] + 1], false
  s.n, s.code, s.alt, s.score, s.backend = 1, 0, false, nil, name
  return s
end

-- request_premade asks Go for the backend's next premade picks, about
-- LEASE_SPAN seconds of this worker's eligible requests to it.
local function request_premade(info, name, now)
  local dt = now - info.preq_t
  if dt < 0.001 then
    dt = 0.001
  end
  local size = floor((info.pdemand - info.preq_demand) / dt * LEASE_SPAN)
  if size < LEASE_MIN then
    size = LEASE_MIN
  elseif size > PREMADE_MAX then
    size = PREMADE_MAX
  end
  info.preq_t, info.preq_demand = now, info.pdemand
  local id = new_id()
  if enqueue(frame(T_PREMADE, id, str8(name) .. u16(size))) then
    info.ppending = true
    waiting[id] = { name = name, info = info, pending = true, premade = true }
    kick()
  end
end

-- same_site_none_incompatible: user agents known to reject or mishandle
-- SameSite=None (Go's balancer.SameSiteNoneIncompatible).
local function same_site_none_incompatible(ua)
  if find(ua, "Chrome/4", 1, true) or find(ua, "Chrome/5", 1, true) or find(ua, "Chrome/6", 1, true) then
    return true
  end
  if find(ua, "CPU iPhone OS 12", 1, true) or find(ua, "iPad; CPU OS 12", 1, true) then
    return true
  end
  return find(ua, "Macintosh", 1, true) ~= nil and find(ua, "Intel Mac OS X 10_14", 1, true) ~= nil and
    find(ua, "Safari", 1, true) ~= nil and find(ua, "Chrome", 1, true) == nil
end

-- should_set_cookie: a new session's cookie is set only for the hosts and
-- Ingress paths the recipe lists (server_name "_" is host "_"; a host with
-- at least one character before its first dot also matches "*." and the
-- rest).
function should_set_cookie(r)
  local locs = r.locations
  if not locs then
    return false
  end
  local host = ngx_var.host or ""
  if ngx_var.server_name == "_" then
    host = "_"
  end
  local paths = locs[host]
  if not paths then
    local dot = find(host, ".", 1, true)
    if dot and dot > 1 then
      paths = r.wlocations[sub(host, dot + 1)]
    end
  end
  return paths ~= nil and paths[ngx_var.location_path or ""] == true
end

-- sticky_cookie writes a new session's Set-Cookie for upstream key key as
-- Go's sticky balancer writes it (lua-resty-cookie's attribute order).
local cookiebuf = {}
function sticky_cookie(r, key)
  local t = cookiebuf
  t[1], t[2], t[3], t[4], t[5] = r.name, "=", key, "|", r.bkey
  local n = 5
  if r.has_expires then
    n = n + 1
    t[n] = "; Expires=" .. ngx.cookie_time(ngx.time() + r.expires)
  end
  if r.maxage ~= "" then
    n = n + 1
    t[n] = "; Max-Age=" .. r.maxage
  end
  if r.domain ~= "" then
    n = n + 1
    t[n] = "; Domain=" .. r.domain
  end
  n = n + 1
  if r.path ~= "" then
    t[n] = "; Path=" .. r.path
  else
    t[n] = "; Path=" .. (ngx_var.location_path or "")
  end
  if r.secure or ngx_var.https == "on" then
    n = n + 1
    t[n] = "; Secure"
  end
  n = n + 1
  t[n] = "; HttpOnly"
  if r.samesite ~= "" then
    local omit = false
    if r.cond_none and r.samesite == "None" then
      local ua = ngx_var.http_user_agent
      omit = ua ~= nil and same_site_none_incompatible(ua)
    end
    if not omit then
      n = n + 1
      t[n] = "; SameSite=" .. r.samesite
    end
  end
  return table.concat(t, "", 1, n)
end

-- take_premade fills s with the next of the picks Go made ahead for
-- requests to this backend that carry none of its variables, and reports
-- whether there was one. Like leases, a batch is used for at most
-- LEASE_TTL, and the next one is asked for as soon as one starts being
-- used; when none is at hand the request asks Go itself.
local function take_premade(s, info, name)
  local now = ngx_now()
  info.pdemand = info.pdemand + 1
  local cur = info.pcur
  if not cur or cur.i > cur.n or now - cur.t >= LEASE_TTL then
    local nxt = info.pnext
    if cur then
      cur.n = 0
    end
    if nxt and nxt.n > 0 and now - nxt.t < LEASE_TTL then
      info.pcur, info.pnext = nxt, cur
      cur = nxt
    else
      info.pcur = nil
      cur = nil
    end
    if not info.ppending then
      request_premade(info, name, now)
    end
    if not cur then
      return false
    end
  end
  local k = cur.i
  cur.i = k + 1
  local nc, base, c, keys = cur.nc[k], (k - 1) * STRIDE, cur.c, cur.keys
  local cands, cookies = s.cands, s.cookies
  local recipe = keys[base + 1] and info.recipe
  local set = recipe and should_set_cookie(recipe)
  for j = 1, nc do
    local key = keys[base + j]
    cands[j] = c[base + j]
    cookies[j] = set and key and sticky_cookie(recipe, key) or false
  end
  s.n, s.code, s.alt, s.backend = nc, 0, cur.alt[k], cur.backend[k]
  s.score = cur.score[k] or nil
  return true
end

-- vars_absent reports whether the request has none of the variables the
-- backend's picks read (premade picks are made for such requests).
local function vars_absent(info)
  local vars = info.vars
  for j = 1, info.nvars do
    if ngx_var[vars[j]] ~= nil then
      return false
    end
  end
  return true
end

-- fallback fills s from the backend's last peer list, round robin.
local function fallback(s, info)
  local np = info.npeers
  if np == 0 then
    return nil
  end
  local idx = info.rr % np
  info.rr = idx + 1
  s.rpeers, s.rn, s.rpos, s.ridx, s.rinfo = info.peers, np, idx, idx, info
  s.n, s.code, s.alt, s.score, s.backend, s.fallback = min(np, 3), 0, false, nil, s.name, true
  return s
end

-- candidate returns the peer for attempt i (1, 2, ...) of result s and the
-- Set-Cookie it needs (or false). Attempts beyond the candidates cycle
-- through them.
--
-- A retry of a round-robin request decided from the worker's lease (or,
-- while Go is unreachable, its fallback rotation) takes the next position
-- of that rotation, and so uses it up, as ingress-nginx's round robin calls
-- find() again for each attempt: with one peer of four refusing
-- connections, each live peer gets a third of the requests
-- (TestShimDecisions). The position after the request's own was not
-- reserved for it: a retry taking it gave the refusing peer's successor
-- its share twice. A position whose peer this request already tried is
-- used up and passed over (ingress-nginx may repeat a failed peer when
-- other requests took the positions in between, or here when the next
-- lease is not contiguous with the last). A pick Go answered itself keeps
-- Go's candidates.
function _M.candidate(s, i)
  local info = s.rinfo
  if info then
    local cands = s.cands
    if i == 1 then
      local peer = s.rpeers[s.ridx + 1]
      cands[1] = peer
      return peer, false
    end
    if infos[s.name] == info then
      local peers, np = info.peers, info.npeers
      for _ = 1, np do
        local idx
        if s.fallback then
          idx = info.rr % np
          info.rr = idx + 1
        else
          local _
          _, idx = lease_next(info, s.name)
          if not idx then
            break
          end
        end
        local peer = peers[idx + 1]
        local seen = false
        for k = 1, i - 1 do
          if cands[k] == peer then
            seen = true
            break
          end
        end
        if not seen then
          cands[i] = peer
          return peer, false
        end
      end
    end
    -- Every peer tried, or no lease: continue from the request's own
    -- position.
    local peer = s.rpeers[((s.rpos + (i - 1) % s.n) % TWO32) % s.rn + 1]
    cands[i] = peer
    return peer, false
  end
  local rp = s.rpeers
  if rp then
    if i == 1 then
      return rp[s.ridx + 1], false
    end
    return rp[((s.rpos + (i - 1) % s.n) % TWO32) % s.rn + 1], false
  end
  local k = (i - 1) % s.n + 1
  return s.cands[k], s.cookies[k]
end

-- pick_frame builds the pick frame of request id to backend name, with the
-- variables info names.
local function pick_frame(id, name, info)
  local nv = info.nvars
  if nv == 0 then
    return frame(T_PICK, id, str8(name) .. "\0")
  end
  local parts = { str8(name), char(0) }
  local k = 0
  local vars, names = info.vars, info.names
  for j = 1, nv do
    local v = ngx_var[vars[j]]
    if v then
      k = k + 1
      parts[#parts + 1] = names[j]
      parts[#parts + 1] = str16(v)
    end
  end
  parts[2] = char(k)
  return frame(T_PICK, id, table.concat(parts))
end

-- same_vars reports whether two infos name the same variables.
local function same_vars(a, b)
  if a.nvars ~= b.nvars then
    return false
  end
  for j = 1, a.nvars do
    if a.names[j] ~= b.names[j] then
      return false
    end
  end
  return true
end

-- pick asks Go for the candidates of one request to backend name. It returns
-- a result table (code, alt, backend, score, n, cands, cookies; pass it to
-- release when the request is done), or nil when the backend is unknown or
-- nothing is known about it and Go cannot be reached (the caller answers
-- 503).
function _M.pick(name)
  local info = get_info(name)
  if not info then
    if info == nil then
      log_once("unavailable", "no answer from ", _M.socket, " about backend ", name)
    end
    return nil
  end
  local s = get_slot()
  s.name, s.attempt = name, 0
  if not connected then
    log_once("fallback", "Go side unreachable; hash and sticky tables as last sent, round robin over the last peer lists")
    -- The last table Go sent keeps deciding: the same peers as before Go
    -- went away, sticky cookies honoured.
    if info.ring and ring_pick(s, info, name) then
      return s
    end
    return fallback(s, info)
  end
  if info.leasable and take_leased(s, info, name) then
    return s
  end
  -- Decision data is used only while it is of Go's current generation
  -- (get_info waits for a fresh info, but returns the old one when Go does
  -- not answer in time).
  if info.gen == gen and tables then
    if info.ring then
      if ring_pick(s, info, name) then
        return s
      end
      -- A new sticky session: premade by Go, its cookie written here.
      if info.premade and not info.pfailed and take_premade(s, info, name) then
        return s
      end
    elseif info.hashtable and not info.tpending and not info.tfailed then
      request_table(info, name, info.tloaded or 0)
    elseif info.premade and not info.pfailed and vars_absent(info) and take_premade(s, info, name) then
      return s
    end
  end
  for round = 1, 2 do
    local id = new_id()
    if not ask(s, id, pick_frame(id, name, info)) then
      log_once("timeout", "no pick answer within ", _M.timeout * 1000, " ms; round robin over the last peer list")
      return fallback(s, info)
    end
    if s.gen == info.gen or round == 2 then
      return s
    end
    -- Go's configuration changed since info: Go decided on the variables
    -- info named. Keep its decision if the new info names the same ones;
    -- else ask again with them.
    local fresh = get_info(name)
    if not fresh or fresh == info or same_vars(fresh, info) then
      return s
    end
    info = fresh
  end
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
  local info = infos[name]
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
          enqueue(frame(T_DONE, 0, backend .. str8(a) .. "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1"))
        end
      end
    end
  end
  local peer = last(addrs)
  local header = last(ngx_var.upstream_header_time)
  local failed = (header == nil or header == "-") and 1 or 0
  local status = tonumber(last(ngx_var.upstream_status)) or 0
  enqueue(frame(T_DONE, 0, backend .. str8(peer) .. u32(usec(ngx_var.upstream_connect_time)) ..
    u32(usec(header)) .. u32(usec(ngx_var.upstream_response_time)) .. u16(status) .. char(failed)))
end

-- fallback_for returns a result from the last peer list without asking Go
-- (for phases that cannot wait: balancer_by_lua in locations with no
-- rewrite handler, such as custom error pages).
function _M.fallback_for(name)
  local info = infos[name]
  if not info then
    return nil
  end
  local s = get_slot()
  s.name, s.attempt = name, 0
  return fallback(s, info)
end

-- invalidate makes every backend info this worker holds, and the decision
-- data on it, unusable: the next request to each backend waits for a fresh
-- one. configuration.lua calls it when a POST of backends succeeded, so the
-- worker that served the POST decides nothing on the old backends after it
-- (the generation push may come a moment later).
function _M.invalidate()
  for _, info in pairs(infos) do
    info.gen = -1
  end
end

function _M.connected()
  return connected
end

_M._frame, _M._str8, _M._u32 = frame, str8, u32
_M.WARN = WARN

return _M
