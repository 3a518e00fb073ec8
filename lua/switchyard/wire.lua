-- switchyard.wire: the pick protocol's frames (docs/pick-protocol.md):
-- constants, encoders, and the decoders of the replies every module reads.

local bit = require("bit")
local ffi = require("ffi")
local byte, char, sub = string.byte, string.char, string.sub
local band, rshift = bit.band, bit.rshift
local tonumber = tonumber

local _M = {
  VERSION = 1,
  -- Frame types; replies set the high bit.
  T = { PICK = 1, DONE = 2, INFO = 3, LEASE = 4, COUNTS = 5, REQUESTS = 6, SUBSCRIBE = 7, TABLE = 8, PREMADE = 9,
    ROUTE = 10, PICK_REPLY = 0x81, INFO_REPLY = 0x83, LEASE_REPLY = 0x84, GEN = 0x87, TABLE_REPLY = 0x88,
    PREMADE_REPLY = 0x89, ROUTE_REPLY = 0x8A },
  CODE_UNKNOWN = 1,
  TWO32 = 4294967296,
  -- The IEEE 754 bits of -1.0, "not scored", as sent big-endian.
  NO_SCORE = "\191\240\0\0\0\0\0\0",
}
local VERSION, CODE_UNKNOWN, NO_SCORE = _M.VERSION, _M.CODE_UNKNOWN, _M.NO_SCORE

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

local dbl = ffi.new("double[1]")
local dbl_bytes = ffi.cast("uint8_t*", dbl)
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
  local code, i0 = byte(b, i), i
  info.gen = be32(b, i + 1)
  info.leasable = band(byte(b, i + 5), 1) == 1
  info.scored = band(byte(b, i + 5), 2) == 2
  info.connect_section = band(byte(b, i + 5), 4) == 4
  info.tables = band(byte(b, i + 5), 8) == 8
  info.hashtable = band(byte(b, i + 5), 16) == 16
  info.premade = band(byte(b, i + 5), 32) == 32
  info.timed_counts = band(byte(b, i + 5), 128) == 128
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
  if band(byte(b, i0 + 5), 64) == 64 then
    -- The route section (a backend with a canary the shim routes itself).
    local rt = {}
    local function s8()
      local l = byte(b, i)
      local v = sub(b, i + 1, i + l)
      i = i + 1 + l
      return v
    end
    rt.alt, rt.pcookie, rt.pkey, rt.acookie, rt.akey = s8(), s8(), s8(), s8(), s8()
    rt.hmode = byte(b, i)
    i = i + 1
    rt.hvar = s8()
    local l = byte(b, i) * 256 + byte(b, i + 1)
    rt.hvalue = sub(b, i + 2, i + 1 + l)
    i = i + 2 + l
    rt.cvar = s8()
    rt.weight, rt.total = be32(b, i), be32(b, i + 4)
    rt.pown, rt.aown = byte(b, i + 8), byte(b, i + 9)
    if not rt.aown or i + 9 ~= #b or rt.total == 0 or rt.hmode > 4 or rt.pown == 0 or rt.pown > 4 or rt.aown > 4
        or (rt.aown == 0) ~= (rt.alt == "") then
      error("bad route section")
    end
    info.route = rt
  end
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

_M.u16, _M.u32, _M.str8, _M.str16, _M.frame = u16, u32, str8, str16, frame
_M.be32, _M.f64, _M.parse_info, _M.parse_pick = be32, f64, parse_info, parse_pick

return _M
