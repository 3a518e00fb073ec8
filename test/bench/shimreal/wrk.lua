-- wrk script of test/bench/shim-real.sh. Arguments (after the URL):
--   prefix  the location to request ("/rr/", "/chash/", ...)
--   nkeys   0: always the prefix; n > 0: prefix .. "k" .. (i mod n), so a
--           hashing case spreads over n request URIs
--   cookie  "" or a Cookie field ("route=..."): when set, every second
--           request of a thread carries it and the others carry no cookie
--   header  "" or "Name:v1,v2,...": each request URI is sent once without
--           the header and once with each value, in turn
-- Requests are built once in init, so the script costs wrk the same for
-- every case and both configurations.
local reqs = {}
local n = 0

-- SHIMREAL_PACE_MS, when set, paces every connection: it waits that many
-- milliseconds after each answer before its next request (wrk's delay()),
-- so the fronts run below saturation and a latency is the front's time
-- for the request, not the queue in front of a saturated worker.
local pace = tonumber(os.getenv("SHIMREAL_PACE_MS") or "")
if pace and pace > 0 then
  function delay()
    return pace
  end
end

function init(args)
  local prefix = args[1] or "/"
  local nkeys = tonumber(args[2] or "0") or 0
  local cookie = args[3] or ""
  local hname, hvalues = nil, {}
  local hspec = args[4] or ""
  if hspec ~= "" then
    local name, list = hspec:match("^([^:]+):(.*)$")
    hname = name
    for v in list:gmatch("[^,]+") do
      hvalues[#hvalues + 1] = v
    end
  end
  local paths = {}
  if nkeys > 0 then
    for i = 0, nkeys - 1 do
      paths[#paths + 1] = prefix .. "k" .. i
    end
  else
    paths[1] = prefix
  end
  for _, p in ipairs(paths) do
    reqs[#reqs + 1] = wrk.format("GET", p, {})
    if cookie ~= "" then
      reqs[#reqs + 1] = wrk.format("GET", p, { Cookie = cookie })
    end
    for _, v in ipairs(hvalues) do
      reqs[#reqs + 1] = wrk.format("GET", p, { [hname] = v })
    end
  end
end

function request()
  n = n + 1
  return reqs[n % #reqs + 1]
end

-- done writes the run's latency distribution, when SHIMREAL_HIST names a
-- file, so shimreal can pool the rounds' requests into one p99 (hist.go):
-- lines "microseconds requests", the latency at the middle of each slice
-- of the requests and how many requests the slice holds; slices of 0.5 %
-- up to the 98th percentile, of 0.01 % above it. (wrk 4.1's stats object
-- cannot be indexed by value: Debian's build answers latency[i] with i
-- itself, so percentile() is the way in.)
function done(summary, latency, requests)
  local path = os.getenv("SHIMREAL_HIST")
  if not path or path == "" then
    return
  end
  local n = summary.requests
  local f = assert(io.open(path, "w"))
  local function slice(from, to, step)
    for lo = from, to - step / 2, step do
      f:write(string.format("%d %.4f\n", latency:percentile(lo + step / 2), n * step / 100))
    end
  end
  slice(0, 98, 0.5)
  slice(98, 100, 0.01)
  f:close()
end
