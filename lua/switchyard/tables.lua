-- switchyard.tables: the tables Go sends for chash, chashsubset and sticky
-- backends (docs/pick-protocol.md, 0x08), fetched in the background in
-- chunks into FFI arrays, kept in the shared dict for the other workers, and
-- looked up per request: the key's CRC32 on the ring, the sticky cookie's
-- upstream key, a new session's Set-Cookie written from Go's recipe.
-- In: backend infos (state.infos), requests' variables. Out: filled pick
-- results, or nil when the table does not decide the request.

local ffi = require("ffi")
local ngx = ngx
local bit = require("bit")
local wire = require("switchyard.wire")
local byte, sub, find, match = string.byte, string.sub, string.find, string.match
local band = bit.band
local floor, random = math.floor, math.random
local tonumber, pairs = tonumber, pairs
local ngx_var = ngx.var
local T, TWO32 = wire.T, wire.TWO32
local u32, str8, frame, be32 = wire.u32, wire.str8, wire.frame, wire.be32
local state = require("switchyard.state")
local conn = require("switchyard.conn")
local parse_info = wire.parse_info
local enqueue, kick, new_id, log_once, waiting = conn.enqueue, conn.kick, conn.new_id, conn.log_once, conn.waiting
local crc32 = ngx.crc32_long
local uint32_array, uint16_array = ffi.typeof("uint32_t[?]"), ffi.typeof("uint16_t[?]")

-- MAXHASH is the sentinel after a table's last point: no hash is greater.
local MAXHASH = 4294967295

-- search returns the first index in [lo, hi] whose hash is at least h;
-- hashes[hi] is at least h.
local function search(hashes, lo, hi, h)
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if hashes[mid] < h then
      lo = mid + 1
    else
      hi = mid
    end
  end
  return lo
end

-- build_buckets splits the 32-bit hash space into a power of two buckets,
-- at least twice the points (at most 2^20), and records for each the
-- index of the first point at or after its start (ttotal past the last
-- point): ring_index's first guess; one more entry, ttotal, ends the last
-- bucket.
local function build_buckets(info)
  local hashes, total = info.thashes, info.ttotal
  local bits = 1
  while bits < 20 and 2 ^ bits < 2 * total do
    bits = bits + 1
  end
  local n, scale = 2 ^ bits, 2 ^ (32 - bits)
  local buckets = uint32_array(n + 1)
  local j = 0
  for b = 0, n - 1 do
    local start = b * scale
    while j < total and hashes[j] < start do
      j = j + 1
    end
    buckets[b] = j
  end
  buckets[n] = total
  info.tbuckets, info.tscale = buckets, scale
end

local _M = {}
local load_table

-- request_table asks for the chunk of a backend's hash table from point
-- offset (a background ask: no request waits for it).
function _M.request_table(info, name, offset)
  local id = new_id()
  if enqueue(frame(T.TABLE, id, str8(name) .. u32(offset))) then
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
  r.change_on_failure = band(flags, 8) == 8
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
load_table = function(info, name, b, from_shared)
  info.tpending = false
  local code, tgen = byte(b, 7), be32(b, 8)
  if code ~= 0 or tgen ~= info.gen or state.infos[name] ~= info then
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
  if info.ring then
    -- A complete table is never replaced in place (a new generation
    -- brings a new info): a stray reply is dropped, so that ring_index
    -- never reads new points through the old buckets.
    return nil
  end
  if offset == 0 then
    -- One more hash than points: the sentinel ring_index stops at.
    info.thashes, info.towners, info.ttotal, info.tloaded = uint32_array(total + 1), uint16_array(total), total, 0
    info.thashes[total] = MAXHASH
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
  if state.shared and not from_shared then
    state.shared:set("switchyard:table:" .. name .. ":" .. offset, b)
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
      _M.request_table(info, name, info.tloaded)
    end
    return nil
  end
  if total > 0 then
    build_buckets(info)
  end
  info.key, info.keyvar, info.nkey = key, keyvar, nk
  info.tkind, info.cookie = kind, key[1]
  info.ring = true
  return nil
end

-- load_shared_chunks loads info's table from the chunks in the shared dict,
-- in order, until it is whole or a chunk is missing or does not fit (a
-- chunk of another generation leaves info.tfailed set).
local function load_shared_chunks(info, name)
  local offset = 0
  while true do
    local chunk = state.shared:get("switchyard:table:" .. name .. ":" .. offset)
    if not chunk then
      return
    end
    local ok, err = pcall(load_table, info, name, chunk, true)
    if not ok or err or info.ring or info.tfailed or info.tloaded == offset then
      return
    end
    offset = info.tloaded
  end
end

-- shared_info returns the backend info (and table) another worker got, from
-- the shared dict, or nil; for a worker that has none while Go is away.
function _M.shared_info(name)
  local b = state.shared and state.shared:get("switchyard:info:" .. name)
  if not b then
    return nil
  end
  local ok, info = pcall(parse_info, b, 7)
  if not ok or info.unknown then
    return nil
  end
  state.infos[name] = info
  if info.hashtable then
    load_shared_chunks(info, name)
    if not info.ring then
      info.tfailed = false
    end
  end
  log_once("state.shared", "Go side unreachable; backend ", name, " served from what another worker had")
  return info
end

-- shared_table loads info's table from the chunks another worker left in
-- the shared dict, once per info, when they are of info's generation (a
-- worker whose own ask for it was lost with the connection to Go).
function _M.shared_table(info, name)
  if info.tshared or not state.shared then
    return
  end
  info.tshared = true
  info.tloaded, info.tpending, info.tfailed = 0, false, false
  load_shared_chunks(info, name)
  if info.ring then
    log_once("state.shared", "Go side unreachable; the table of backend ", name, " taken from what another worker had")
  end
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
-- ring_index is the index of the point owning hash h in info's table:
-- the first point at or after h, wrapping to the first. The bucket of h
-- (build_buckets) names the first point at or after the bucket's start;
-- with at least twice as many buckets as points, h's point is that one or
-- the next in all but a few lookups, which search the rest of the bucket
-- (the next bucket's first point is at or after h). No loop runs on the
-- usual path: LuaJIT aborts a trace that meets a loop it did not start
-- at ("inner loop in root trace"), and a binary search on every request
-- left the rewrite phase interpreted (docs/benchmarks.md, run 25).
local function ring_index(info, h)
  local hashes, buckets = info.thashes, info.tbuckets
  local b = floor(h / info.tscale)
  local i = buckets[b]
  if hashes[i] < h then
    i = i + 1
    if hashes[i] < h then
      i = search(hashes, i + 1, buckets[b + 1], h)
    end
  end
  if i == info.ttotal then
    return 0
  end
  return i
end

function _M.ring_pick(s, info, name)
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
  local lo = ring_index(info, crc32(key))
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
function _M.should_set_cookie(r)
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

-- new_session fills s with a new sticky session of backend name, made in
-- this worker on the table Go sent, as ingress-nginx's sticky balancers
-- make one in the worker (sticky_balanced.lua and sticky_persistent.lua
-- pick_new_upstream): one candidate per attempt, each with the upstream
-- key its cookie carries, a peer this request has not got yet.
-- sticky_balanced: the owner in the table of CRC32 of
-- "<ngx.now() + i>.<worker pid>.<random>" for the first i of 1..20 whose
-- peer is new; sticky_persistent: a random new peer and its upstream key.
-- Go's pickNewUpstream makes them the same way, and its table maps such a
-- key back to the same peer, here and in Go (TestShimTables). The first
-- candidate is made now, a retry's when it comes (more), as ingress-nginx
-- makes it then. With keep = 1, s.cands[1] (a returning session's peer,
-- decided from its cookie) stays the first candidate and the retries are
-- new sessions on other peers: change-on-failure.
--
-- Issue 16: new sessions were premade by Go (three keyed candidates each,
-- two of them for retries that seldom come) and fetched in batches; the
-- sidecar spent most of its CPU making them, on the cores nginx needs
-- (docs/benchmarks.md, run 16). The key is a random draw and the peer is
-- the table's owner of it, so the worker makes the session as ingress-nginx
-- does, with the same key text (its own clock and pid), and no request of
-- a sticky backend needs Go once the table is in. It returns nil for a
-- backend without a sticky table.
local worker_pid

-- got reports whether peer is one of the first n candidates.
local function got(cands, n, peer)
  for k = 1, n do
    if cands[k] == peer then
      return true
    end
  end
  return false
end

-- add_session appends one new session of info's table to the n candidates
-- of s, and reports whether there was a peer left for it.
local function add_session(s, info, n)
  local cands, cookies, peers, np = s.cands, s.cookies, info.peers, info.npeers
  if info.tkind == 2 then
    worker_pid = worker_pid or ngx.worker.pid()
    local owners, now = info.towners, ngx.now()
    for i = 1, 20 do
      local key = tostring(now + i) .. "." .. worker_pid .. "." .. random(999999)
      local peer = peers[owners[ring_index(info, crc32(key))] + 1]
      if not got(cands, n, peer) then
        cands[n + 1], cookies[n + 1] = peer, key
        return true
      end
    end
    return false
  end
  local keys = info.keys_of
  if not keys then
    keys = {}
    for key, k in pairs(info.pkeys) do
      keys[k] = key
    end
    info.keys_of = keys
  end
  -- A random peer not got yet, uniformly (util/nodemap.lua random_except):
  -- a few draws over all peers, rejecting those got already, then a draw
  -- over the rest counted out.
  local pick = nil
  for _ = 1, 8 do
    local k = random(np)
    if keys[k] and not got(cands, n, peers[k]) then
      pick = k
      break
    end
  end
  if not pick then
    local left = 0
    for k = 1, np do
      if keys[k] and not got(cands, n, peers[k]) then
        left = left + 1
      end
    end
    if left == 0 then
      return false
    end
    local r = random(left)
    for k = 1, np do
      if keys[k] and not got(cands, n, peers[k]) then
        r = r - 1
        if r == 0 then
          pick = k
          break
        end
      end
    end
  end
  cands[n + 1], cookies[n + 1] = peers[pick], keys[pick]
  return true
end

function _M.new_session(s, info, name, keep)
  local kind, recipe = info.tkind, info.recipe
  if not info.ring or not recipe or (kind ~= 2 and kind ~= 3) or info.npeers == 0 then
    return nil
  end
  local n = keep or 0
  if not add_session(s, info, n) then
    if n == 0 then
      return nil
    end
    return s -- no other peer: the retries are the cookie's peer's
  end
  local set = _M.should_set_cookie(recipe)
  if not set then
    s.cookies[n + 1] = false
  end
  -- s.n: the candidates the request may have (as Go's pick reply); those
  -- after s.made are made by more when an attempt needs them.
  s.n, s.code, s.alt, s.score, s.backend = math.min(3, info.npeers), 0, false, nil, name
  s.recipe, s.sinfo, s.made, s.setc = set and recipe or false, info, n + 1, set
  return s
end

-- more makes candidate s.made + 1 of a new session (new_session) for a
-- retry, and reports false when no peer is left for it (s.n then counts
-- the candidates made, and the attempts cycle through them).
function _M.more(s)
  local n = s.made
  if not add_session(s, s.sinfo, n) then
    s.n = n
    return false
  end
  if not s.setc then
    s.cookies[n + 1] = false
  end
  s.made = n + 1
  return true
end

-- sticky_cookie writes a new session's Set-Cookie for upstream key key as
-- Go's sticky balancer writes it (lua-resty-cookie's attribute order).
local cookiebuf = {}
function _M.sticky_cookie(r, key)
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

_M.cookie_value = cookie_value

conn.handlers[T.TABLE_REPLY] = function(s, b)
  return load_table(s.info, s.name, b)
end

-- Test hooks (TestRingIndex): a table of the sorted hashes given, and
-- the lookup.
function _M._table_info(hashes)
  local total = #hashes
  local info = { thashes = uint32_array(total + 1), ttotal = total }
  for k = 1, total do
    info.thashes[k - 1] = hashes[k]
  end
  info.thashes[total] = MAXHASH
  build_buckets(info)
  return info
end
_M._ring_index = ring_index

return _M
