-- switchyard.state: what the shim's modules share in one nginx worker.
-- Everything runs on the worker's one thread, so no locks.

return {
  -- connected: the pick socket's connection is up.
  connected = false,
  -- connect_section: the Go side of this connection takes requests frames
  -- with a connect-time section (bit 2 of its backend-info flags); learned
  -- from the hello the pump sends on every new connection.
  connect_section = false,
  -- timed_counts: the Go side of this connection takes counts frames with
  -- a timing section (bit 7 of its backend-info flags), so scored
  -- backends' feedback is summed too (switchyard.feedback).
  timed_counts = false,
  -- tables: the Go side of this connection takes subscribe, table and
  -- premade frames (bit 3 of its backend-info flags), learned from the hello.
  tables = false,
  -- gen is the generation of Go's configuration in the last reply or push
  -- read (nil before any; it only moves forward, see conn.see_gen). An info
  -- of another generation is not used to decide a request: the next one
  -- asks for a fresh one and waits (pick's get_info).
  gen = nil,
  -- infos: backend -> info {gen, vars, peers, npeers, rr, ...}, with the
  -- decision data on it (lease, table, premade picks).
  infos = {},
  -- shared keeps the last backend-info and table frames any worker got, in
  -- ingress-nginx's configuration_data dict (every nginx.conf of it
  -- declares one), so a worker that never heard of a backend while Go was
  -- up (a new worker after a reload, or one that got no request for it) can
  -- still serve it while Go is down, with the same tables.
  shared = ngx.shared and ngx.shared.configuration_data,
}
